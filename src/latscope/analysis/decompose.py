"""Latency decomposition: where each millisecond of a run's TTFT and E2E went, client and server joined.

The client's TTFT (first content chunk - scheduled send) is split into the client's own send lag,
what lies between client and server (network + HTTP frontend + client parsing = client TTFT - send
lag - server TTFT), and the server's TTFT (``vllm:time_to_first_token_seconds``: frontend arrival ->
first token, tokenization included), itself split into queue (``request_queue_time``: QUEUED ->
SCHEDULED), prefill (``request_prefill_time``: SCHEDULED -> first token) and the remainder
(tokenization, IPC between API server and engine, output processing). E2E splits into TTFT and
decode (first chunk -> last byte), with the engine's own decode time beside it. Server means come
from histogram ``_sum``/``_count`` deltas over the run window, quantiles from its ``le`` buckets
(with the bucket width as error bound), or -- better -- from per-request server timings when the
server returned them (vLLM ``--enable-per-request-metrics``), or -- best -- from the server's own
span of each request joined to the client's record by trace id (``latscope.analysis.join``):
then the network + frontend and "other" rows are per-request differences with exact percentiles.
Source order: spans, then per-request response fields, then histograms. Every row names its source.
Differences of means are means; they have no percentiles, so none are given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import orjson

from latscope.analysis.join import SOURCE as SPAN_SOURCE
from latscope.analysis.join import PerRequestSplit, join_spans
from latscope.analysis.stats import e2e_ms, ttft_ms
from latscope.model import MetricSnapshot, RequestRecord
from latscope.server.metrics import (HistogramDelta, gauge_series, has_vllm_series,
                                     histogram_delta)
from latscope.server.scrape import read_snapshots

H_TTFT = "vllm:time_to_first_token_seconds"
H_QUEUE = "vllm:request_queue_time_seconds"
H_PREFILL = "vllm:request_prefill_time_seconds"
H_DECODE = "vllm:request_decode_time_seconds"
H_E2E = "vllm:e2e_request_latency_seconds"
_PER_REQUEST = "per-request server timings (response 'metrics')"
# Spans are the source when at least this share of the run's requests was joined; below it the
# joined requests may not represent the run (the rows then come from the next source).
SPAN_COVERAGE = 0.95


@dataclass(slots=True)
class Component:
    key: str  # stable id: "ttft.server.queue"
    label: str
    parent: str | None
    source: str  # where the number comes from (a histogram, the client records, a difference)
    mean_ms: float | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p50_error_ms: float | None = None  # bucket width around a histogram quantile (None: exact)
    p99_error_ms: float | None = None
    p50_lower_ms: float | None = None  # lower edge of that bucket (0: only "<= upper" is known)
    p99_lower_ms: float | None = None
    count: int | None = None
    share: float | None = None  # of the parent's total (client TTFT or client E2E)
    note: str = ""


@dataclass(slots=True)
class Decomposition:
    components: list[Component]
    dominant_ttft: str | None  # key of the largest leaf of client TTFT
    dominant_e2e: str | None
    window_s: float | None  # server window (first to last scrape)
    server_source: str  # "histograms" | "per-request" | "histograms+per-request" | "none"
    client_requests: int
    server_requests: float | None  # finished requests the server counted in the window
    notes: list[str] = field(default_factory=list)
    gauges: dict[str, Any] = field(default_factory=dict)  # peak server gauges in the window
    scrape: dict[str, Any] | None = None  # the scraper's status and overhead (decompose_run)
    findings: list[Any] = field(default_factory=list)  # Findings from metrics and this split
    # The run's requests joined with the server's spans (latscope.analysis.join); None without
    # spans. Its percentiles are exact, per request; to_dict writes it, rows left out, as
    # "per_request" (the rows go to per_request.json).
    split: PerRequestSplit | None = None

    def component(self, key: str) -> Component | None:
        return next((c for c in self.components if c.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "split"}
        data["components"] = [asdict(c) for c in self.components]
        data["findings"] = [f.to_dict() for f in self.findings]
        data["per_request"] = self.split.to_dict(rows=False) if self.split is not None else None
        return data


def _client_stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"mean_ms": None, "count": 0}
    arr = np.asarray(values, dtype=float)
    p50, p99 = np.percentile(arr, [50, 99])
    return {"mean_ms": float(arr.mean()), "p50_ms": float(p50), "p99_ms": float(p99),
            "count": int(arr.size)}


def _hist_stats(h: HistogramDelta | None) -> dict[str, Any] | None:
    if h is None or h.count <= 0:
        return None
    out: dict[str, Any] = {"mean_ms": h.mean * 1e3, "count": int(h.count)}
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        est = h.quantile(q)
        if est is not None and not est.above_top_bucket:
            out[f"{name}_ms"] = est.value * 1e3
            out[f"{name}_error_ms"] = est.error_bound * 1e3
            out[f"{name}_lower_ms"] = est.lower * 1e3
    return out


def per_request_server_timings(record: RequestRecord) -> dict[str, float] | None:
    """vLLM's per-request fields (``--enable-per-request-metrics``), in ms, if the record has them.

    Beware vLLM's naming: its ``time_to_first_token_ms`` is scheduled -> first token, i.e. the
    *prefill* interval, not TTFT from arrival (vllm/entrypoints/generate/base/serving.py,
    ``build_per_request_timing_metrics``); ``generation_time_ms`` is first -> last token.
    """
    server = record.server or {}
    m = server.get("metrics") if isinstance(server.get("metrics"), dict) else server
    out = {}
    for ours, theirs in (("queue", "queue_time_ms"), ("prefill", "time_to_first_token_ms"),
                         ("decode", "generation_time_ms")):
        value = m.get(theirs)
        if isinstance(value, (int, float)):
            out[ours] = float(value)
    return out or None


def _span_stats(split: PerRequestSplit | None, name: str) -> dict[str, Any] | None:
    s = split.stats.get(name) if split is not None else None
    if not s or not s.get("count"):
        return None
    return {"mean_ms": s["mean"], "p50_ms": s.get("p50"), "p99_ms": s.get("p99"),
            "count": s["count"]}


def decompose(records: Iterable[RequestRecord], snapshots: list[MetricSnapshot] | None = None,
              split: PerRequestSplit | None = None) -> Decomposition:
    """Decompose one run (or one sweep step): its ok, non-warm-up records and the snapshots that
    bound it (first and last are the window; a single snapshot means 'since server start'),
    and, when given, the run's records joined with the server's spans (``join_spans``)."""
    recs = [r for r in records if r.ok and not r.warmup and r.first_token_ns is not None]
    snaps = sorted(snapshots or [], key=lambda s: s.t_ns)
    notes: list[str] = []
    first = snaps[0] if len(snaps) >= 2 else None
    last = snaps[-1] if snaps else None
    if len(snaps) == 1:
        notes.append("one /metrics snapshot only: server figures cover everything since server "
                     "start")
    vllm = last is not None and has_vllm_series(last)
    if last is not None and not vllm:
        notes.append("the server exposes no vllm:* series (stats disabled?): client view only")
    hist = {name: (histogram_delta(first, last, name) if vllm else None)
            for name in (H_TTFT, H_QUEUE, H_PREFILL, H_DECODE, H_E2E)}

    per_req = [t for r in recs if (t := per_request_server_timings(r))]
    client = {
        "ttft": _client_stats([v for r in recs if (v := ttft_ms(r)) is not None]),
        "lag": _client_stats([(r.sent_ns - r.scheduled_ns) / 1e6 for r in recs]),
        "e2e": _client_stats([v for r in recs if (v := e2e_ms(r)) is not None]),
        "decode": _client_stats([(r.end_ns - r.first_token_ns) / 1e6 for r in recs
                                 if r.end_ns is not None]),
    }

    spans = split if split is not None and split.joined and \
        split.coverage >= SPAN_COVERAGE else None
    if split is not None and split.joined and spans is None:
        notes.append(f"only {split.joined} of {split.completed} requests were joined with a "
                     f"server span: server rows come from the next source")
    elif spans is not None and spans.joined < spans.completed:
        notes.append(f"server rows from spans cover {spans.joined} of {spans.completed} "
                     "requests")

    def server_part(part: str, hname: str) -> tuple[dict[str, Any] | None, str]:
        if (stats := _span_stats(spans, f"{part}_ms")) is not None:
            return stats, SPAN_SOURCE
        values = [t[part] for t in per_req if part in t]
        if values and len(values) == len(recs):
            return _client_stats(values), _PER_REQUEST
        stats = _hist_stats(hist[hname])
        return stats, f"{hname} (histogram delta over the run)"

    rows: list[Component] = []
    ttft_total = client["ttft"]["mean_ms"]
    e2e_total = client["e2e"]["mean_ms"]

    def add(key: str, label: str, parent: str | None, source: str, stats: dict[str, Any] | None,
            total: float | None, note: str = "") -> Component:
        stats = stats or {"mean_ms": None}
        share = (stats["mean_ms"] / total if stats.get("mean_ms") is not None and total else None)
        comp = Component(key, label, parent, source, stats.get("mean_ms"), stats.get("p50_ms"),
                         stats.get("p99_ms"), stats.get("p50_error_ms"), stats.get("p99_error_ms"),
                         stats.get("p50_lower_ms"), stats.get("p99_lower_ms"),
                         stats.get("count"), share, note)
        rows.append(comp)
        return comp

    add("ttft", "TTFT (client)", None, "client records: first chunk - scheduled", client["ttft"],
        ttft_total)
    add("ttft.send_lag", "client send lag", "ttft", "client records: sent - scheduled",
        client["lag"], ttft_total)
    s_ttft, s_ttft_src = server_part("server_ttft", H_TTFT)
    q_stats, q_src = server_part("queue", H_QUEUE)
    p_stats, p_src = server_part("prefill", H_PREFILL)
    if (net := _span_stats(spans, "frontend_network_ms")) is not None:
        net_src = f"{SPAN_SOURCE}: per request, TTFT - send lag - server TTFT"
    else:
        net = _diff(client["ttft"], client["lag"], s_ttft)
        net_src = f"difference of means: TTFT - send lag - {s_ttft_src.split(' (')[0]}"
    add("ttft.network", "network + HTTP frontend + client", "ttft", net_src, net, ttft_total,
        note=_negative_note(net))
    add("ttft.server", "server TTFT (arrival -> first token)", "ttft", s_ttft_src, s_ttft,
        ttft_total)
    add("ttft.server.queue", "queue (QUEUED -> SCHEDULED)", "ttft.server", q_src, q_stats,
        ttft_total)
    add("ttft.server.prefill", "prefill (SCHEDULED -> first token)", "ttft.server", p_src, p_stats,
        ttft_total)
    if (rest := _span_stats(spans, "other_ms")) is not None:
        rest_src = f"{SPAN_SOURCE}: per request, server TTFT - queue - prefill"
    else:
        rest = _diff(s_ttft, q_stats, p_stats)
        rest_src = "difference of means: server TTFT - queue - prefill"
    add("ttft.server.other", "tokenization + IPC + output processing", "ttft.server",
        rest_src, rest, ttft_total, note=_negative_note(rest))

    add("e2e", "E2E (client)", None, "client records: end - scheduled", client["e2e"], e2e_total)
    add("e2e.ttft", "TTFT (client)", "e2e", "client records", client["ttft"], e2e_total)
    add("e2e.decode", "decode (client: first chunk -> end)", "e2e", "client records",
        client["decode"], e2e_total)
    d_stats, d_src = server_part("decode", H_DECODE)
    add("e2e.decode.engine", "decode in the engine (first -> last token)", "e2e.decode", d_src,
        d_stats, e2e_total)
    e_stats, e_src = server_part("server_e2e", H_E2E)
    add("e2e.server", "server E2E (arrival -> last token)", "e2e", e_src, e_stats, e2e_total,
        note="shown for comparison; not a part of the sum")

    server_count = hist[H_E2E].count if hist[H_E2E] is not None else None
    mismatch = server_count is not None and abs(server_count - len(recs)) > max(1, 0.02 * len(recs))
    if recs and mismatch:
        notes.append(f"the server finished {server_count:g} requests in the window, the client "
                     f"{len(recs)}: other traffic, warm-up or aborted requests are mixed in")
    source = ("per-request" if per_req and not vllm else
              "histograms+per-request" if per_req else "histograms" if vllm else "none")
    if spans is not None:
        source = "spans" if source == "none" else f"spans+{source}"
    leaves = [c for c in rows if c.key in ("ttft.send_lag", "ttft.network", "ttft.server.queue",
                                           "ttft.server.prefill", "ttft.server.other")]
    if s_ttft is None:  # without server data the only split is lag vs the rest
        leaves = [c for c in rows if c.key == "ttft.send_lag"]
    return Decomposition(rows, _dominant(leaves), _dominant([c for c in rows if c.parent == "e2e"
                                                             and c.key != "e2e.server"]),
                         (last.t_ns - first.t_ns) / 1e9 if first and last else None,
                         source, len(recs), server_count, notes,
                         gauges=_peak_gauges(snaps) if vllm else {},
                         split=split if split is not None and split.joined else None)


def _peak_gauges(snaps: list[MetricSnapshot]) -> dict[str, Any]:
    """Largest value each gauge took over the scrapes (running/waiting summed over engines,
    KV cache usage the fullest engine's, 0-1)."""
    out: dict[str, Any] = {}
    for key, name, combine in (("running_max", "vllm:num_requests_running", sum),
                               ("waiting_max", "vllm:num_requests_waiting", sum),
                               ("kv_cache_usage_max", "vllm:kv_cache_usage_perc", max)):
        points = gauge_series(snaps, name, combine=combine)
        out[key] = max((v for _, v in points), default=None)
    return out


def _diff(total: dict[str, Any] | None, *parts: dict[str, Any] | None) -> dict[str, Any] | None:
    if total is None or total.get("mean_ms") is None:
        return None
    if any(p is None or p.get("mean_ms") is None for p in parts):
        return None
    return {"mean_ms": total["mean_ms"] - sum(p["mean_ms"] for p in parts)}  # type: ignore[index]


def _negative_note(stats: dict[str, Any] | None) -> str:
    if stats and stats.get("mean_ms") is not None and stats["mean_ms"] < 0:
        return "negative: smaller than the error of the figures it is computed from"
    return ""


def _dominant(components: list[Component]) -> str | None:
    scored = [c for c in components if c.mean_ms is not None]
    if not scored:
        return None
    return max(scored, key=lambda c: c.mean_ms or 0.0).key


def decompose_run(run_dir: Path) -> Decomposition:
    """Decompose a run directory; writes ``decomposition.json`` and ``server_timeseries.json``."""
    from latscope.analysis.server_findings import (findings_from_decomposition,
                                                   findings_from_metrics)
    from latscope.load.rundir import read_run
    from latscope.server.timeseries import server_timeseries

    run_dir = Path(run_dir)
    _, records, _ = read_run(run_dir)  # one reader of requests.jsonl for every verb
    snapshots = read_snapshots(run_dir)
    split, span_notes = _join_run_spans(run_dir, records)
    result = decompose(records, snapshots, split)
    result.notes += span_notes
    scrape_json = run_dir / "metrics" / "scrape.json"
    if scrape_json.is_file():
        result.scrape = orjson.loads(scrape_json.read_bytes())
    result.findings = findings_from_decomposition(result) + findings_from_metrics(snapshots)
    (run_dir / "decomposition.json").write_bytes(
        orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2))
    if snapshots:
        origin = _origin_ns(run_dir) or snapshots[0].t_ns
        (run_dir / "server_timeseries.json").write_bytes(
            orjson.dumps(server_timeseries(snapshots, origin), option=orjson.OPT_INDENT_2))
    return result


def _join_run_spans(run_dir: Path, records: list[RequestRecord]
                    ) -> tuple[PerRequestSplit | None, list[str]]:
    """The run's records joined with ``spans.jsonl`` (written to ``per_request.json``), and a
    note when the requests were traced but no span came back."""
    from latscope.server.otlp import STATUS_FILE, read_spans

    traced = any(r.trace_id for r in records)
    spans = read_spans(run_dir)
    split = join_spans(records, spans) if traced and spans else None
    if split is not None and split.joined:
        (run_dir / "per_request.json").write_bytes(
            orjson.dumps(split.to_dict(), option=orjson.OPT_INDENT_2))
        return split, []
    if traced and (run_dir / STATUS_FILE).is_file():
        return None, ["requests carried a traceparent but the server sent no request spans "
                      "(tracing off? start vLLM with --otlp-traces-endpoint; see docs/observe.md)"
                      ": server rows from the next source (per-request fields, histograms)"]
    return None, []


def _origin_ns(run_dir: Path) -> int | None:
    manifest = run_dir / "manifest.json"
    if not manifest.is_file():
        return None
    try:
        data = orjson.loads(manifest.read_bytes())
    except orjson.JSONDecodeError:
        return None
    value = data.get("start_ns") if isinstance(data, dict) else None
    return int(value) if isinstance(value, (int, float)) else None


def print_decomposition(result: Decomposition, console: Any = None) -> None:
    from latscope.report.observe import print_decomposition as _print

    _print(result, console)
