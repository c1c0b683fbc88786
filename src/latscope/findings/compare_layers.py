"""Where in the chain a change happened: the TTFT / E2E decomposition of both sides, part by
part, and the server's gauges that say why a part moved ("+38 ms of +41 ms is queueing: running
capped at 2 in NEW (was 8)").

A part is named only when the total it belongs to changed (its interval excludes zero): the
parts' means carry no interval of their own, and a part's move inside a total's noise is noise.
The part named is the one whose move, in the total's direction, is largest; "most of it" when
it is at least half of the total's change.
"""

from __future__ import annotations

from typing import Sequence

from latscope.analysis.compare_facts import Layer, ServerState
from latscope.analysis.compare_model import LayerRow, MetricRow, StateRow

# the parts that add up to client TTFT and client E2E (analysis.decompose's keys), in words
TTFT_PARTS = {"ttft.client": "latscope's own client", "ttft.network": "the network",
              "ttft.frontend": "the HTTP frontend", "ttft.server.queue": "queueing",
              "ttft.server.prefill": "prefill", "ttft.server.other": "tokenization + IPC"}
E2E_PARTS = {"e2e.ttft": "TTFT", "e2e.decode": "decode"}
# the layer (Finding.layer) of each part
LAYER_OF = {"ttft.client": "client", "ttft.network": "network", "ttft.frontend": "frontend",
            "ttft.server.queue": "queue", "ttft.server.prefill": "prefill",
            "ttft.server.other": "frontend", "e2e.ttft": "queue", "e2e.decode": "decode"}
MOST = 0.5  # a part that is this share of the total's change is "most of it"
SHARE_FLOOR = 0.02  # a total that moved less than this of itself gives its parts no share
_STATE = (("running_max", "running (most at once)", ""),
          ("running_queued", "running while requests waited", ""),
          ("waiting_max", "waiting (most at once)", ""),
          ("kv_usage_max", "KV cache use (peak)", "%"),
          ("preemptions", "preemptions", ""),
          ("prefix_hit_rate", "prefix-cache hit rate", "%"))


def layer_rows(base: Sequence[Sequence[Layer]], new: Sequence[Sequence[Layer]]
               ) -> list[LayerRow]:
    """Each part of TTFT and E2E on both sides (a side's mean over its runs)."""
    rows = []
    for total, parts in (("ttft", TTFT_PARTS), ("e2e", E2E_PARTS)):
        for key in (total, *parts):
            a, b = _mean_of(base, key), _mean_of(new, key)
            if a is None and b is None:
                continue
            label, source = _label(base, new, key)
            rows.append(LayerRow(key=key, label=label, total=total, base_ms=a, new_ms=b,
                                 delta_ms=b - a if a is not None and b is not None else None,
                                 share=None, source=source))
    return _with_shares(rows)


def _mean_of(side: Sequence[Sequence[Layer]], key: str) -> float | None:
    values = [layer.mean_ms for layers in side for layer in layers
              if layer.key == key and layer.mean_ms is not None]
    return sum(values) / len(values) if values and len(values) == len(side) else None


def _label(base: Sequence[Sequence[Layer]], new: Sequence[Sequence[Layer]], key: str
           ) -> tuple[str, str]:
    for layers in (*base, *new):
        for layer in layers:
            if layer.key == key:
                return layer.label, layer.source
    return key, ""


def _with_shares(rows: list[LayerRow]) -> list[LayerRow]:
    """Each part's share of its total's change, where the total moved by at least
    ``SHARE_FLOOR`` of itself (a share of a change near zero is a ratio of noises)."""
    totals = {r.key: r.delta_ms for r in rows if r.key in ("ttft", "e2e") and r.delta_ms
              and r.base_ms and abs(r.delta_ms) >= SHARE_FLOOR * abs(r.base_ms)}
    out = []
    for r in rows:
        total = totals.get(r.total)
        share = (r.delta_ms / total if r.key != r.total and r.delta_ms is not None and total
                 else None)
        out.append(LayerRow(key=r.key, label=r.label, total=r.total, base_ms=r.base_ms,
                            new_ms=r.new_ms, delta_ms=r.delta_ms, share=share, source=r.source))
    return out


def state_rows(base: Sequence[ServerState], new: Sequence[ServerState]) -> list[StateRow]:
    """The server's gauges on both sides (the most any run of a side saw; hit rate: mean)."""
    rows = []
    for key, label, unit in _STATE:
        a, b = _state_of(base, key), _state_of(new, key)
        if a is not None or b is not None:
            rows.append(StateRow(key=key, label=label, base=a, new=b, unit=unit))
    return rows


def _state_of(side: Sequence[ServerState], key: str) -> float | None:
    values: list[float] = [v for s in side if (v := getattr(s, key)) is not None]
    if not values:
        return None
    return sum(values) / len(values) if key == "prefix_hit_rate" else max(values)


def moved_part(rows: list[LayerRow], total: str) -> LayerRow | None:
    """The part whose move, in its total's direction, is largest (None without parts)."""
    head = next((r for r in rows if r.key == total), None)
    if head is None or not head.delta_ms:
        return None
    sign = 1 if head.delta_ms > 0 else -1
    parts = [r for r in rows if r.total == total and r.key != total and r.delta_ms is not None
             and r.delta_ms * sign > 0]
    return max(parts, key=lambda r: abs(r.delta_ms or 0.0), default=None)


def layer_sentence(rows: list[LayerRow], metrics: list[MetricRow], state: list[StateRow]
                   ) -> tuple[str, LayerRow | None]:
    """'TTFT mean +41 ms (+40%): +38 ms of it is queueing: running capped at 2 in NEW
    (was 8)', or why no part is named; and the part named."""
    for total, metric, parts in (("ttft", "ttft_mean", TTFT_PARTS), ("e2e", "e2e_mean", None)):
        row = next((m for m in metrics if m.metric == metric), None)
        if row is None or not _changed(row):
            continue
        part = moved_part(rows, total)
        head = next((r for r in rows if r.key == total), None)
        if part is None or head is None or head.delta_ms is None:
            continue
        if total == "e2e" and part.key == "e2e.ttft":
            continue  # a TTFT move is named by the TTFT sentence when it could be
        words = (parts or E2E_PARTS).get(part.key, part.label)
        share = part.share or 0.0
        how = "of it is" if share >= MOST else "of it, the largest part, is"
        sentence = (f"{row.label} {_ms(head.delta_ms)} ({(row.change or 0) * 100:+.0f}%): "
                    f"{_ms(part.delta_ms or 0.0)} {how} {words}")
        why = _why(part.key, state)
        return (f"{sentence}: {why}" if why else sentence), part
    if not any(r.key in ("ttft", "e2e") for r in rows):
        return "no decomposition in these runs (no /metrics scrapes): no part to name", None
    return "neither mean TTFT nor mean E2E changed beyond its interval: no part to name", None


def _changed(row: MetricRow) -> bool:
    interval = row.between if row.interval == "between-run" else row.within
    return not row.why and bool(interval) and (interval[0] > 0 or interval[1] < 0)  # type: ignore[index]


def _why(key: str, state: list[StateRow]) -> str:
    """The server's gauges that explain a part's move."""
    by = {s.key: s for s in state}
    if key in ("ttft.server.queue", "e2e.ttft"):
        return _queue_why(by)
    if key == "e2e.decode":
        run = by.get("running_max")
        if run and run.new is not None and run.base is not None and run.new != run.base:
            return f"up to {run.new:g} requests decoded at once in NEW (was {run.base:g})"
    if key == "ttft.server.prefill":
        hit = by.get("prefix_hit_rate")
        if hit and hit.new is not None and hit.base is not None:
            return f"prefix-cache hit rate {hit.new:.0%} in NEW (was {hit.base:.0%})"
    return ""


def _queue_why(by: dict[str, StateRow]) -> str:
    cap, run, wait = by.get("running_queued"), by.get("running_max"), by.get("waiting_max")
    parts = []
    if cap and cap.new is not None:
        was = (f"was {cap.base:g}" if cap.base is not None else
               f"was up to {run.base:g} with none waiting" if run and run.base is not None
               else "none waited in BASE")
        waited = f", {wait.new:g} waiting" if wait and wait.new else ""
        parts.append(f"running capped at {cap.new:g} in NEW{waited} ({was})")
    kv = by.get("kv_usage_max")
    if kv and kv.new is not None and kv.new >= 0.9:
        parts.append(f"KV cache {kv.new:.0%} full in NEW (was {_pct(kv.base)})")
    pre = by.get("preemptions")
    if pre and pre.new and (pre.base or 0) < pre.new:
        parts.append(f"{pre.new:g} preemptions in NEW (was {pre.base or 0:g})")
    return "; ".join(parts)


def _ms(value: float) -> str:
    """'+2110 ms', '+38 ms', '+4.35 ms'."""
    return f"{value:+.0f} ms" if abs(value) >= 10 else f"{value:+.3g} ms"


def _pct(value: float | None) -> str:
    return "not recorded" if value is None else f"{value:.0%}"
