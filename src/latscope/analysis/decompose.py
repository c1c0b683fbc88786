"""Latency decomposition: where each millisecond of a run's TTFT and E2E went, client and server joined.

The client's TTFT is split into
- latscope's own client: the delay between the latency's origin and the send (``sent - origin``;
  zero where TTFT is timed from the send) plus the receive delay, estimated by the mean event-loop
  lag of the run (a late loop stamps the first chunk late by about that much);
- the network round trip, when a probe measured it on the same path (``latscope net``: keep-alive
  ``GET /health`` p50, which also holds the server's smallest HTTP handling);
- the HTTP frontend and first-chunk delivery: what remains between client and engine
  (client TTFT - client - network - server TTFT); without a round-trip probe it is reported
  together with the network as one component and the report says that it could not be split;
- the server's TTFT (``vllm:time_to_first_token_seconds``: frontend arrival -> first token,
  tokenization included), itself split into queue (``request_queue_time``: QUEUED -> SCHEDULED),
  prefill (``request_prefill_time``: SCHEDULED -> first token) and the remainder (tokenization, IPC
  between API server and engine, output processing).
E2E splits into TTFT and decode (first chunk -> last byte), with the engine's own decode time beside
it. Server means come from histogram ``_sum``/``_count`` deltas over the run window, quantiles from
its ``le`` buckets (with the bucket width as error bound), or -- better -- from per-request server
timings when the server returned them (vLLM ``--enable-per-request-metrics``), or -- best -- from
the server's own span of each request joined to the client's record by trace id
(``latscope.analysis.join``): then the frontend and "other" rows are per-request differences with
exact percentiles. Source order: spans, then per-request response fields, then histograms. Every
row names its source. Differences of means are means; they have no percentiles, so none are given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

import orjson

from latscope.analysis.clientside import (
    ClientFigures,
    ClientFold,
    Folds,
    RowFile,
    RowStats,
    client_stats,
    per_request_server_timings,
)
from latscope.analysis.join import SOURCE as SPAN_SOURCE
from latscope.analysis.join import PerRequestSplit, SpanJoin, span_timings
from latscope.model import MetricSnapshot, RequestRecord
from latscope.rundir import iter_records, write_json
from latscope.server.metrics import HistogramDelta, gauge_series, has_vllm_series, histogram_delta
from latscope.server.scrape import read_snapshots

__all__ = ["Component", "Decomposition", "decompose", "decompose_run",
           "per_request_server_timings"]

H_TTFT = "vllm:time_to_first_token_seconds"
H_QUEUE = "vllm:request_queue_time_seconds"
H_PREFILL = "vllm:request_prefill_time_seconds"
H_DECODE = "vllm:request_decode_time_seconds"
H_E2E = "vllm:e2e_request_latency_seconds"
_PER_REQUEST = "per-request server timings (response 'metrics')"
# Spans are the source when at least this share of the run's requests was joined; below it the
# joined requests may not represent the run (the rows then come from the next source).
SPAN_COVERAGE = 0.95
# The parts of client TTFT that add up to it (those present in a given run).
TTFT_LEAVES = ("ttft.client", "ttft.network", "ttft.frontend", "ttft.server.queue",
               "ttft.server.prefill", "ttft.server.other")


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


def _hist_stats(h: HistogramDelta | None) -> RowStats | None:
    if h is None or h.count <= 0:
        return None
    bucketed: dict[str, float] = {}  # a quantile above the top bucket is not known
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        est = h.quantile(q)
        if est is not None and not est.above_top_bucket:
            bucketed[f"{name}_ms"] = est.value * 1e3
            bucketed[f"{name}_error_ms"] = est.error_bound * 1e3
            bucketed[f"{name}_lower_ms"] = est.lower * 1e3
    return RowStats((h.mean or 0.0) * 1e3, count=int(h.count), **bucketed)  # count > 0


def _span_stats(split: PerRequestSplit | None, name: str, shift_ms: float = 0.0
                ) -> RowStats | None:
    s = split.stats.get(name) if split is not None else None
    if not s or not s.get("count"):
        return None
    return RowStats(s["mean"] - shift_ms, s["p50"] - shift_ms, s["p99"] - shift_ms,
                    count=int(s["count"]))


@dataclass(slots=True)
class _Window:
    """What one run's decomposition is computed from: the client's figures and the server's
    over the same window, each source selected once."""

    client: ClientFold  # ok, measured (and the late warm-ups the server counted)
    late_warmups: int  # warm-ups that finished in the window, not counted above
    snaps: list[MetricSnapshot]
    first: MetricSnapshot | None
    last: MetricSnapshot | None
    vllm: bool  # the server exposes vllm:* series
    hist: dict[str, HistogramDelta | None]
    spans: PerRequestSplit | None  # the joined spans, when they cover enough of the run
    notes: list[str]

    def server_part(self, part: str, hname: str) -> tuple[RowStats | None, str]:
        """One server interval's figures from the best source: spans, then per-request
        timings (when every request has them), then the histogram delta."""
        if (stats := _span_stats(self.spans, f"{part}_ms")) is not None:
            return stats, SPAN_SOURCE
        values = self.client.per_req.get(part)
        if values and len(values) == self.client.count:
            return client_stats(values), _PER_REQUEST
        return _hist_stats(self.hist[hname]), f"{hname} (histogram delta over the run)"


class _Rows:
    """The decomposition's rows, each one's share taken of its tree's client total."""

    def __init__(self) -> None:
        self.rows: list[Component] = []

    def add(self, key: str, label: str, parent: str | None, source: str,
            stats: RowStats | None, total: float | None, note: str = "") -> Component:
        stats = stats or RowStats(None)
        share = (stats.mean_ms / total if stats.mean_ms is not None and total else None)
        if share is not None and not -1e-9 <= share <= 1 + 1e-9:
            # not a share of the client's total: the server's window also holds other requests
            # (warm-up requests still finishing, other clients), or the parts disagree
            note = (note + "; " if note else "") + (
                f"{share:.0%} of the client's total: not a share (the server's window holds "
                "other requests too)")
            share = None
        comp = Component(key, label, parent, source, stats.mean_ms, stats.p50_ms, stats.p99_ms,
                         stats.p50_error_ms, stats.p99_error_ms, stats.p50_lower_ms,
                         stats.p99_lower_ms, stats.count, share, note)
        self.rows.append(comp)
        return comp


def decompose(records: Iterable[RequestRecord], snapshots: list[MetricSnapshot] | None = None,
              *, client_loop_lag_ms: float | None = None, network_rtt_ms: float | None = None,
              split: PerRequestSplit | None = None) -> Decomposition:
    """Decompose one run (or one sweep step): its ok, non-warm-up records and the snapshots that
    bound it (first and last are the window; a single snapshot means 'since server start').

    ``client_loop_lag_ms`` is the run's mean event-loop lag (the client's receive delay
    estimate), ``network_rtt_ms`` a round trip measured on the same path; either may be None.
    ``split``: the run's records joined with the server's spans (``join_spans``), if any.
    The records are read once, one at a time (``records`` may be a file's stream)."""
    snaps = sorted(snapshots or [], key=lambda s: s.t_ns)
    folds = Folds(*_window_ends(snaps))
    for record in records:
        folds.add(record)
    return _decompose(folds, snaps, client_loop_lag_ms, network_rtt_ms, split)


def _window_ends(snaps: list[MetricSnapshot]) -> tuple[MetricSnapshot | None,
                                                         MetricSnapshot | None]:
    """The server's window: its first and last scrape (one scrape: since the server's start)."""
    return (snaps[0] if len(snaps) >= 2 else None), (snaps[-1] if snaps else None)


def _decompose(folds: Folds, snaps: list[MetricSnapshot], client_loop_lag_ms: float | None,
               network_rtt_ms: float | None, split: PerRequestSplit | None) -> Decomposition:
    w = _select_window(folds, snaps, split)
    client = w.client.figures()
    rows = _Rows()
    origin = "+".join(sorted(w.client.origins)) or "sent"
    s_ttft = _ttft_rows(rows, w, client, origin, client_loop_lag_ms, network_rtt_ms)
    _e2e_rows(rows, w, client, origin)
    e2e_hist = w.hist[H_E2E]
    server_count = e2e_hist.count if e2e_hist is not None else None
    _note_count_mismatch(w, server_count)
    leaves = [c for c in rows.rows if c.key in TTFT_LEAVES]
    if s_ttft is None:  # without server data the only split is the client vs the rest
        leaves = [c for c in rows.rows if c.key == "ttft.client"]
    e2e_parts = [c for c in rows.rows if c.parent == "e2e" and c.key != "e2e.server"]
    return Decomposition(rows.rows, _dominant(leaves), _dominant(e2e_parts),
                         (w.last.t_ns - w.first.t_ns) / 1e9 if w.first and w.last else None,
                         _server_source(w), w.client.count, server_count, w.notes,
                         gauges=_peak_gauges(w.snaps) if w.vllm else {},
                         split=split if split is not None and split.joined else None)


def _select_window(folds: Folds, snaps: list[MetricSnapshot],
                   split: PerRequestSplit | None) -> _Window:
    notes: list[str] = []
    first, last = _window_ends(snaps)
    client, late = folds.measured, folds.late
    if len(snaps) == 1:
        notes.append("one /metrics snapshot only: server figures cover everything since server "
                     "start")
    vllm = last is not None and has_vllm_series(last)
    if last is not None and not vllm:
        notes.append("the server exposes no vllm:* series (stats disabled?): client view only")
    hist = {name: (histogram_delta(first, last, name) if vllm and last is not None else None)
            for name in (H_TTFT, H_QUEUE, H_PREFILL, H_DECODE, H_E2E)}
    spans = split if split is not None and split.joined and \
        split.coverage >= SPAN_COVERAGE else None
    late_warmups = late.count
    if late.count and vllm and spans is None and client.per_req_records < client.count:
        # The server rows come from histogram deltas over the window, which count every
        # request that finished in it, the late warm-ups too: count them on the client's side
        # as well, or the two sides hold different requests (a 0.6 s step at c=8 once read a
        # server TTFT 156 ms above the client's, its queue share refused as impossible).
        client.extend(late)
        notes.append(f"{late.count} warm-up requests still running when the window "
                     "opened finished inside it: the server's histograms count them, so the "
                     "client's figures here count them too")
        late_warmups = 0
    if split is not None and split.joined and spans is None:
        notes.append(f"only {split.joined} of {split.completed} requests were joined with a "
                     f"server span: server rows come from the next source")
    elif spans is not None and spans.joined < spans.completed:
        notes.append(f"server rows from spans cover {spans.joined} of {spans.completed} "
                     "requests")
    return _Window(client, late_warmups, snaps, first, last, vllm, hist, spans, notes)


def _ttft_rows(rows: _Rows, w: _Window, client: ClientFigures, origin: str,
               client_loop_lag_ms: float | None, network_rtt_ms: float | None
               ) -> RowStats | None:
    """Client TTFT and its parts; returns the server TTFT's figures (None: no server data)."""
    total = client.ttft.mean_ms
    rows.add("ttft", "TTFT (client)", None, f"client records: first chunk - {origin}",
             client.ttft, total)
    client_part = _client_part(client.lag, client_loop_lag_ms)
    rows.add("ttft.client", "latscope client (send + receive delay)", "ttft",
             "client records: send - latency origin" + (
                 f", + mean event-loop lag {client_loop_lag_ms:.2f} ms (receive delay estimate)"
                 if client_loop_lag_ms is not None else ""), client_part, total)
    s_ttft, s_ttft_src = w.server_part("server_ttft", H_TTFT)
    q_stats, q_src = w.server_part("queue", H_QUEUE)
    p_stats, p_src = w.server_part("prefill", H_PREFILL)
    _outside_rows(rows, w, client.ttft, client_part, s_ttft, client_loop_lag_ms, network_rtt_ms)
    rows.add("ttft.server", "server TTFT (arrival -> first token)", "ttft", s_ttft_src, s_ttft,
             total)
    rows.add("ttft.server.queue", "queue (QUEUED -> SCHEDULED)", "ttft.server", q_src, q_stats,
             total)
    rows.add("ttft.server.prefill", "prefill (SCHEDULED -> first token)", "ttft.server", p_src,
             p_stats, total)
    if (rest := _span_stats(w.spans, "other_ms")) is not None:
        rest_src = f"{SPAN_SOURCE}: per request, server TTFT - queue - prefill"
    else:
        rest = _diff(s_ttft, q_stats, p_stats)
        rest_src = f"difference of means: {H_TTFT} - queue - prefill"
    rows.add("ttft.server.other", "tokenization + IPC + output processing", "ttft.server",
             rest_src, rest, total, note=_negative_note(rest))
    return s_ttft


def _outside_rows(rows: _Rows, w: _Window, ttft: RowStats, client_part: RowStats | None,
                  s_ttft: RowStats | None, client_loop_lag_ms: float | None,
                  network_rtt_ms: float | None) -> None:
    """What lies between latscope's client and the engine: the network (when probed) and the
    HTTP frontend with first-chunk delivery."""
    total = ttft.mean_ms
    # With spans, per request: TTFT - send delay - server TTFT, less the run's mean loop lag
    # (the receive delay estimate, a constant) and the probed round trip.
    shift = max(0.0, client_loop_lag_ms or 0.0) + (network_rtt_ms or 0.0)
    per_request_outside = _span_stats(w.spans, "frontend_network_ms", shift)
    server_name = "server TTFT" if w.spans is not None else H_TTFT
    how = (f"{SPAN_SOURCE}: per request" if per_request_outside is not None
           else "difference of means")
    outside = per_request_outside or _diff(ttft, client_part, s_ttft)
    if network_rtt_ms is None:
        rows.add("ttft.frontend", "network + HTTP frontend (not split: no round-trip probe)", "ttft",
                 f"{how}: TTFT - client - {server_name}", outside, total,
                 note=_negative_note(outside))
        return
    rows.add("ttft.network", "network round trip", "ttft",
             "net probe: keep-alive GET /health p50 on the same path",
             RowStats(network_rtt_ms), total)
    frontend = outside if per_request_outside else _diff(outside, RowStats(network_rtt_ms))
    rows.add("ttft.frontend", "HTTP frontend + first-chunk delivery", "ttft",
             f"{how}: TTFT - client - network - {server_name}", frontend, total,
             note=_negative_note(frontend))


def _e2e_rows(rows: _Rows, w: _Window, client: ClientFigures, origin: str) -> None:
    total = client.e2e.mean_ms
    rows.add("e2e", "E2E (client)", None, f"client records: end - {origin}", client.e2e, total)
    rows.add("e2e.ttft", "TTFT (client)", "e2e", "client records", client.ttft, total)
    rows.add("e2e.decode", "decode (client: first chunk -> end)", "e2e", "client records",
             client.decode, total)
    d_stats, d_src = w.server_part("decode", H_DECODE)
    rows.add("e2e.decode.engine", "decode in the engine (first -> last token)", "e2e.decode", d_src,
             d_stats, total)
    e_stats, e_src = w.server_part("server_e2e", H_E2E)
    rows.add("e2e.server", "server E2E (arrival -> last token)", "e2e", e_src, e_stats, total,
             note="shown for comparison; not a part of the sum")


def _note_count_mismatch(w: _Window, server_count: float | None) -> None:
    expected = w.client.count + w.late_warmups  # the warm-ups that finished in the window
    mismatch = server_count is not None and abs(server_count - expected) > max(1, 0.02 * expected)
    if w.client.count and mismatch:
        warm = f" and {w.late_warmups} warm-ups" if w.late_warmups else ""
        w.notes.append(f"the server finished {server_count:g} requests in the window, the client "
                       f"{w.client.count}{warm}: other traffic, warm-up or aborted requests are "
                       "mixed in")


def _server_source(w: _Window) -> str:
    per_req = w.client.per_req_records
    source = ("per-request" if per_req and not w.vllm else
              "histograms+per-request" if per_req else "histograms" if w.vllm else "none")
    if w.spans is not None:
        source = "spans" if source == "none" else f"spans+{source}"
    return source


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


def _client_part(lag: RowStats, loop_lag_ms: float | None) -> RowStats | None:
    if lag.mean_ms is None:
        return None
    return RowStats(lag.mean_ms + max(0.0, loop_lag_ms or 0.0), count=lag.count)


def _diff(total: RowStats | None, *parts: RowStats | None) -> RowStats | None:
    if total is None or total.mean_ms is None:
        return None
    means = [p.mean_ms for p in parts if p is not None and p.mean_ms is not None]
    if len(means) < len(parts):
        return None
    return RowStats(total.mean_ms - sum(means))


def _negative_note(stats: RowStats | None) -> str:
    if stats and stats.mean_ms is not None and stats.mean_ms < 0:
        return "negative: smaller than the error of the figures it is computed from"
    return ""


def _dominant(components: list[Component]) -> str | None:
    scored = [c for c in components if c.mean_ms is not None]
    if not scored:
        return None
    return max(scored, key=lambda c: c.mean_ms or 0.0).key


def decompose_run(run_dir: Path, *, network_rtt_ms: float | None = None) -> Decomposition:
    """Decompose a run directory; writes ``decomposition.json``, ``server_timeseries.json`` and,
    where the server's spans came, ``per_request.json``.

    Its records are read once, a line at a time, their token times never decoded, and joined
    with the spans as they come: what it holds grows by a few floats a request, not by the
    records (``ClientFold``, ``SpanJoin``). The client's receive delay estimate is the run's
    mean event-loop lag from ``summary.json``."""
    from latscope.rundir import read_meta
    from latscope.server.otlp_record import iter_spans
    from latscope.server.timeseries import server_timeseries

    run_dir = Path(run_dir)
    _, summary = read_meta(run_dir)
    snapshots = sorted(read_snapshots(run_dir), key=lambda s: s.t_ns)
    loop_lag = ((summary.get("client") or {}).get("loop_lag_ms") or {}).get("mean")
    folds = Folds(*_window_ends(snapshots))
    timings = span_timings(iter_spans(run_dir))
    rows = RowFile(run_dir / "per_request.json") if timings else None
    join = SpanJoin(timings, keep_rows=False, on_row=rows.add) if rows else None
    try:
        for record in iter_records(run_dir, token_times=False):
            folds.add(record)
            if join is not None:
                join.add(record)
        split, span_notes = _joined(run_dir, folds.traced, join, rows)
    finally:
        if rows is not None:
            rows.close()
    result = _decompose(folds, snapshots, loop_lag, network_rtt_ms, split)
    result.notes += span_notes
    scrape_json = run_dir / "metrics" / "scrape.json"
    if scrape_json.is_file():
        result.scrape = orjson.loads(scrape_json.read_bytes())
    write_json(run_dir / "decomposition.json", result.to_dict())
    if snapshots:
        origin = _origin_ns(run_dir) or snapshots[0].t_ns
        write_json(run_dir / "server_timeseries.json", server_timeseries(snapshots, origin))
    return result


def _joined(run_dir: Path, traced: bool, join: SpanJoin | None, rows: RowFile | None
            ) -> tuple[PerRequestSplit | None, list[str]]:
    """The run's records joined with its spans (their rows in ``per_request.json``), and a
    note when the requests were traced but no span came back."""
    from latscope.server.otlp_record import STATUS_FILE

    split = join.result() if join is not None and traced else None
    if split is not None and split.joined and rows is not None:
        rows.finish(split)
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
