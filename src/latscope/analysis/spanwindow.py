"""The server's span of every request that finished in a passive window: exact per-request
percentiles of its TTFT, queue, prefill, decode and E2E (no buckets), and the TTFT split from
them.

vLLM started with ``--otlp-traces-endpoint`` exports one span per request carrying
``gen_ai.latency.*`` attributes (seconds; ``latscope.analysis.join.SPAN_FIELDS``). No client
record is needed: a passive run joins nothing, it reads the server's own timings of real
requests. A span belongs to the window when it ended between the window's first and last
scrape (wall clock, the span's ``end_unix_ns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from latscope.analysis.join import SPAN_FIELDS
from latscope.analysis.traffic import Split
from latscope.server.otlp_decode import Span
from latscope.stats import distribution

SOURCE = "per-request spans (OTLP)"
_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class SpanWindow:
    requests: int  # request spans that ended in the window
    outside: int  # request spans received that ended outside it
    stats: dict[str, dict[str, Any]]  # server_ttft_ms, queue_ms, ... -> distribution (ms)

    @property
    def split(self) -> Split | None:
        """Means over the requests, the rest (tokenization, IPC, output) per request."""
        ttft = self.stats.get("server_ttft_ms")
        if not ttft or not ttft.get("count"):
            return None
        queue, prefill, other = (self.stats.get(k) or {} for k in ("queue_ms", "prefill_ms",
                                                                     "other_ms"))
        return Split(ttft["mean"], queue.get("mean"), prefill.get("mean"), other.get("mean"),
                     float(ttft["count"]), float(queue.get("count") or 0) or None)


def span_window(spans: Iterable[Span], start_wall: float | None = None,
                end_wall: float | None = None) -> SpanWindow | None:
    """The request spans that ended inside ``[start_wall, end_wall]`` (unix seconds; None:
    unbounded), read; None when there is none."""
    rows: list[dict[str, float]] = []
    outside = 0
    for span in spans:
        attrs = span.attributes
        if "gen_ai.latency.time_to_first_token" not in attrs:
            continue  # vLLM's start-up spans carry no request timings
        end = (span.end_unix_ns or 0) / 1e9
        if (start_wall is not None and end < start_wall) or \
                (end_wall is not None and end > end_wall):
            outside += 1
            continue
        rows.append(_row(attrs))
    if not rows:
        return None
    stats = {}
    for name in ("server_ttft_ms", "queue_ms", "prefill_ms", "other_ms", "decode_ms",
                 "server_e2e_ms"):
        values = [r[name] for r in rows if name in r]
        if values:
            stats[name] = distribution(values, _PERCENTILES)
    return SpanWindow(len(rows), outside, stats)


def _row(attrs: dict[str, Any]) -> dict[str, float]:
    row = {}
    for attr, name in SPAN_FIELDS.items():
        value = attrs.get(attr)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            row[name] = float(value) * 1e3
    if {"server_ttft_ms", "queue_ms", "prefill_ms"} <= set(row):
        row["other_ms"] = row["server_ttft_ms"] - row["queue_ms"] - row["prefill_ms"]
    return row
