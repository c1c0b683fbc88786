"""Each request joined with the server's own record of it: per-request queue, prefill, decode, frontend.

The client sends a fresh W3C ``traceparent`` per request (``RequestRecord.trace_id``); vLLM started
with ``--otlp-traces-endpoint`` exports one ``llm_request`` span per request in that trace
(``latscope.server.otlp``). Matching the two by trace id gives, per request:

- ``client_ttft_ms``: the client's TTFT (``latscope.stats.ttft_ms``) and ``send_lag_ms``
  (latency origin -> sent, the client's own send delay: client TTFT - (first chunk - sent));
- ``server_ttft_ms``: ``gen_ai.latency.time_to_first_token`` (frontend arrival, taken before
  tokenization, -> the first token handled by the frontend's output processor);
- ``queue_ms`` (QUEUED -> SCHEDULED), ``prefill_ms`` (SCHEDULED -> first token), ``decode_ms``
  (first -> last token), all engine-core timestamps; ``scheduler_ms`` when the span has it;
- ``other_ms`` = server TTFT - queue - prefill: tokenization, IPC between API server and engine
  core, output processing;
- ``frontend_network_ms`` = client TTFT - send lag - server TTFT: the network both ways, the HTTP
  frontend before ``arrival_time`` is taken, streaming the first chunk out and the client's
  receive path.

The span's durations are seconds (floats); this module works in milliseconds. Percentiles are
numpy's linear ones over requests, exact (no buckets). A pure function of records and spans.
"""

from __future__ import annotations

import heapq
import math
import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from latscope.model import RequestRecord
from latscope.server.otlp_decode import Span
from latscope.stats import distribution, e2e_ms, ttft_ms

SOURCE = "per-request spans (OTLP)"
# One component's distribution over the joined requests (``latscope.stats.distribution`` of a
# non-empty list: count, mean, std, min, max, p50, p90, p99, ...; every value a number)
Stats = dict[str, float]
PERCENTILES = (50, 90, 99)
# span attribute (seconds) -> our field (ms); vllm/tracing/utils.py SpanAttributes
SPAN_FIELDS = {
    "gen_ai.latency.time_to_first_token": "server_ttft_ms",
    "gen_ai.latency.time_in_queue": "queue_ms",
    "gen_ai.latency.time_in_model_prefill": "prefill_ms",
    "gen_ai.latency.time_in_model_decode": "decode_ms",
    "gen_ai.latency.e2e": "server_e2e_ms",
    "gen_ai.latency.time_in_scheduler": "scheduler_ms",  # declared by vLLM, not set in 0.32
}
# (field, label) in the order reports print them
COMPONENTS = (
    ("client_ttft_ms", "TTFT (client)"),
    ("send_lag_ms", "client send lag"),
    ("frontend_network_ms", "network + HTTP frontend"),
    ("server_ttft_ms", "server TTFT"),
    ("queue_ms", "queue"),
    ("prefill_ms", "prefill"),
    ("other_ms", "tokenize + IPC + output"),
    ("scheduler_ms", "time in scheduler"),
    ("decode_ms", "decode (engine)"),
    ("client_e2e_ms", "E2E (client)"),
    ("server_e2e_ms", "E2E (server)"),
)
_TTFT_ATTR = "gen_ai.latency.time_to_first_token"


@dataclass(slots=True)
class RequestSplit:
    """One request: the client's timing and the server's span of it, in ms."""

    index: int
    request_id: str
    trace_id: str
    group: str
    client_ttft_ms: float
    send_lag_ms: float
    client_e2e_ms: float | None
    server_ttft_ms: float | None = None
    queue_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    server_e2e_ms: float | None = None
    scheduler_ms: float | None = None
    other_ms: float | None = None
    frontend_network_ms: float | None = None
    sent_ns: int = 0  # client clock, to order requests by send time


@dataclass(slots=True)
class PerRequestSplit:
    rows: list[RequestSplit]  # joined requests, in send order ([]: handed out as they came)
    completed: int  # ok, measured (non-warm-up) requests of the run
    joined: int
    without_span: int  # traced, completed, but no span arrived for them
    untraced: int  # completed requests sent without a trace id
    other_spans: int  # request spans matching no completed request (warm-up, other traffic)
    stats: dict[str, Stats]  # field -> its distribution
    groups: dict[str, dict[str, Stats]] = field(default_factory=dict)
    slowest: list[RequestSplit] = field(default_factory=list)  # by client TTFT, slowest first
    source: str = SOURCE
    notes: list[str] = field(default_factory=list)

    @property
    def coverage(self) -> float:
        return self.joined / self.completed if self.completed else 0.0

    def to_dict(self, *, rows: bool = True) -> dict[str, Any]:
        data = asdict(self)
        if not rows:
            data.pop("rows")
        data["coverage"] = self.coverage
        return data


def request_spans(spans: Iterable[Span]) -> dict[str, Span]:
    """trace id -> the span that carries a request's timings (the first, if a trace has many)."""
    out: dict[str, Span] = {}
    for span in spans:
        if _TTFT_ATTR in span.attributes and span.trace_id:
            out.setdefault(span.trace_id, span)
    return out


_TIMINGS = struct.Struct(f"{len(SPAN_FIELDS)}d")  # a span's timings, packed (NaN: not set)


def span_timings(spans: Iterable[Span]) -> dict[str, bytes]:
    """trace id -> the timings of its request span (``request_spans``' choice), in ms in
    ``SPAN_FIELDS``' order, packed: ~80 bytes a span instead of its decoded attributes
    (~1-2 kB), while the spans of a long run wait for their records."""
    out: dict[str, bytes] = {}
    for span in spans:
        attrs = span.attributes
        trace = span.trace_id
        if _TTFT_ATTR not in attrs or not trace or trace in out:
            continue
        values = [attrs.get(attr) for attr in SPAN_FIELDS]
        out[trace] = _TIMINGS.pack(*(float(v) * 1e3 if isinstance(v, (int, float))
                                     and not isinstance(v, bool) else math.nan for v in values))
    return out


def join_spans(records: Iterable[RequestRecord], spans: Iterable[Span], *,
               percentiles: Sequence[float] = PERCENTILES, slowest: int = 5) -> PerRequestSplit:
    """Join a run's records with the spans its server exported, by trace id; the rows kept,
    in send order."""
    join = SpanJoin(span_timings(spans), percentiles=percentiles, slowest=slowest)
    for record in records:
        join.add(record)
    return join.result()


_NAMES = tuple(name for name, _ in COMPONENTS)


class SpanJoin:
    """The join as one pass over a run's records (``add``), bounded whatever the run's length:
    each joined request leaves its components' values (``COMPONENTS``, NaN where unset: 88
    bytes) and its group's number; its span's timings are dropped once joined, the slowest
    requests are a heap of ``slowest``. Its rows are kept (``keep_rows``: sorted by send at
    the end) or handed to ``on_row`` as they come (``decompose_run`` writes them to
    ``per_request.json``), never both needed at once."""

    def __init__(self, timings: dict[str, bytes], *, percentiles: Sequence[float] = PERCENTILES,
                 slowest: int = 5, keep_rows: bool = True,
                 on_row: Callable[[RequestSplit], None] | None = None) -> None:
        self.timings, self.percentiles, self.slowest_n = timings, percentiles, slowest
        self.spans = len(timings)
        self.rows: list[RequestSplit] | None = [] if keep_rows else None
        self.on_row = on_row
        self.values = {name: array("d") for name in _NAMES}
        self.group_of = array("H")  # each row's group, a number into self.groups
        self.groups: dict[str, int] = {}
        self.slowest: list[tuple[float, int, RequestSplit]] = []  # a heap, fastest on top
        self.completed = self.untraced = self.without = self.negative = 0

    def add(self, record: RequestRecord) -> None:
        if not record.ok or record.warmup or (client_ttft := ttft_ms(record)) is None:
            return
        self.completed += 1
        if not record.trace_id:
            self.untraced += 1
            return
        packed = self.timings.pop(record.trace_id, None)
        if packed is None:
            self.without += 1
            return
        row = _split(record, client_ttft, _TIMINGS.unpack(packed))
        for name, values in self.values.items():
            value = getattr(row, name)
            values.append(math.nan if value is None else value)
        self.group_of.append(self.groups.setdefault(row.group, len(self.groups)))
        if row.frontend_network_ms is not None and row.frontend_network_ms < 0:
            self.negative += 1
        entry = (row.client_ttft_ms, len(self.group_of), row)
        if len(self.slowest) < self.slowest_n:
            heapq.heappush(self.slowest, entry)
        elif self.slowest_n:
            heapq.heappushpop(self.slowest, entry)
        if self.rows is not None:
            self.rows.append(row)
        if self.on_row is not None:
            self.on_row(row)

    def result(self) -> PerRequestSplit:
        joined = len(self.group_of)
        columns = {name: np.frombuffer(values, dtype=np.float64)
                   for name, values in self.values.items()}
        groups: dict[str, dict[str, Stats]] = {}
        if len(self.groups) > 1:
            numbers = np.frombuffer(self.group_of, dtype=np.uint16)
            groups = {name: self._stats(columns, numbers == n)
                      for name, n in sorted(self.groups.items())}
        rows = sorted(self.rows, key=lambda r: r.sent_ns) if self.rows is not None else []
        result = PerRequestSplit(
            rows=rows, completed=self.completed, joined=joined, without_span=self.without,
            untraced=self.untraced, other_spans=len(self.timings),
            stats=self._stats(columns, None), groups=groups,
            slowest=[row for _, _, row in sorted(self.slowest, reverse=True)])
        result.notes = _notes(result, self.negative)
        return result

    def _stats(self, columns: dict[str, np.ndarray], rows: np.ndarray | None
               ) -> dict[str, Stats]:
        out: dict[str, Stats] = {}
        for name in _NAMES:
            column = columns[name] if rows is None else columns[name][rows]
            values = column[~np.isnan(column)]
            if values.size:
                out[name] = distribution(values, self.percentiles)
        return out


def _split(record: RequestRecord, client_ttft: float, timings: tuple[float, ...]) -> RequestSplit:
    row = RequestSplit(index=record.index, request_id=record.request_id,
                       trace_id=record.trace_id or "", group=record.group,
                       client_ttft_ms=client_ttft,
                       send_lag_ms=_send_delay_ms(record, client_ttft),
                       client_e2e_ms=e2e_ms(record), sent_ns=record.sent_ns)
    for name, value in zip(SPAN_FIELDS.values(), timings):
        if not math.isnan(value):
            setattr(row, name, value)
    if row.server_ttft_ms is not None:
        row.frontend_network_ms = row.client_ttft_ms - row.send_lag_ms - row.server_ttft_ms
        if row.queue_ms is not None and row.prefill_ms is not None:
            row.other_ms = row.server_ttft_ms - row.queue_ms - row.prefill_ms
    return row


def _send_delay_ms(record: RequestRecord, client_ttft: float) -> float:
    """How long after its latency origin the request was sent: client TTFT minus send -> first
    chunk (so whatever origin ``ttft_ms`` uses, the rest of the split is from the send)."""
    assert record.first_token_ns is not None
    return max(0.0, client_ttft - (record.first_token_ns - record.sent_ns) / 1e6)


def _notes(result: PerRequestSplit, negative: int) -> list[str]:
    notes = []
    if result.without_span:
        notes.append(f"{result.without_span} of {result.completed} completed requests got no "
                     "span from the server (dropped by its exporter, or it was still batching "
                     "them when the run's wait ended)")
    if result.untraced:
        notes.append(f"{result.untraced} completed requests were sent without a traceparent")
    if result.other_spans:
        notes.append(f"{result.other_spans} request spans match no completed request of the "
                     "run (warm-up, failed requests or other traffic)")
    if negative:
        notes.append(f"{negative} requests have server TTFT > client TTFT - send lag: the "
                     "server's and client's clocks disagree (server on another host?)")
    return notes
