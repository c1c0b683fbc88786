"""Rules over a window of live traffic (``latscope.analysis.traffic.WindowFacts``): the passive
diagnosis's findings, from what the server did anyway.

- where the server's own TTFT went over the window (``latency.queue``, ``latency.prefill``,
  ``latency.engine_frontend``, each a share of the mean server TTFT: no client of latscope's);
- what held requests back: the /metrics rules of a load run over the window's scrapes
  (``findings.server``), and, because gauges sampled now and then miss a queue, the batch cap
  read from the histograms by Little's law (``server.queue_max_num_seqs``);
- preemptions summed over the intervals (a counter reset inside the window counts from zero);
- ``server.stall``: requests in the server while nothing was computed;
- ``traffic.spike``: where TTFT stood out, and what was binding then.

Thresholds are stated where defined; every id has its section in docs/findings.md.
"""

from __future__ import annotations

from typing import Sequence

from latscope.analysis.spanwindow import SpanWindow
from latscope.analysis.traffic import KV_FULL, Spike, Split, WindowFacts
from latscope.findings.host import contention_finding
from latscope.findings.inputs import ConclusionInputs
from latscope.findings.latency import Context, share_finding
from latscope.findings.server import (
    findings_from_metrics,
    full_batch_finding,
    preemption_finding,
    stats_disabled_finding,
)
from latscope.findings.telemetry import capacity_hint, idle_time, telemetry_findings
from latscope.model import Evidence, Finding, MetricSnapshot, Severity

REF = "docs/findings.md"
TARGET = "server_ttft_mean"
# Little's law: the batch is at its cap when the mean number running over the window is this
# share of max_num_seqs or more while requests queued (a mean, so a batch that dips between
# bursts still reads full: 1.93 of 2 under 12 req/s on the local CPU target)
FULL_BATCH_MEAN = 0.8
QUEUE_MEAN_MIN = 0.5  # requests waiting on average over the window
STALL_CRITICAL_S = 30.0
SPAN_COVERAGE = 0.95  # analysis.decompose's: spans are the split's source from this coverage
HISTOGRAM_SOURCE = {
    "ttft": "vllm:time_to_first_token_seconds sum / count over the window",
    "queue": "vllm:request_queue_time_seconds sum / count over the window",
    "prefill": "vllm:request_prefill_time_seconds sum / count over the window",
    "other": "difference of means: server TTFT - queue - prefill"}
SPANS_SOURCE = {
    "ttft": "per-request spans (OTLP): gen_ai.latency.time_to_first_token, mean",
    "queue": "per-request spans (OTLP): gen_ai.latency.time_in_queue, mean",
    "prefill": "per-request spans (OTLP): gen_ai.latency.time_in_model_prefill, mean",
    "other": "per-request spans (OTLP): server TTFT - queue - prefill, mean"}
_SPLIT_ROWS = (("ttft.server.queue", "queue (QUEUED -> SCHEDULED)", "queue"),
               ("ttft.server.prefill", "prefill (SCHEDULED -> first token)", "prefill"),
               ("ttft.server.other", "tokenization + IPC + output processing", "other"))


def traffic_findings(inputs: ConclusionInputs) -> list[Finding]:
    """A passive window's findings (``findings.conclude`` calls it; [] for a load run): the
    window's rules over its scrapes, and the host's CPUs and the GPUs' telemetry over it."""
    facts = inputs.traffic
    if facts is None:
        return []
    m = inputs.measured[0] if inputs.measured else None
    out = window_findings(facts, m.snapshots if m else (),
                          max_num_seqs_source=inputs.limits.max_num_seqs_source,
                          spans=inputs.spans)
    cpu = m.cpu if m is not None else None
    contention = contention_finding(cpu, facts.label) if cpu else None
    out += [contention] if contention is not None else []
    if m is not None and m.telemetry:
        out += telemetry_findings(m.telemetry)
        idle = idle_time(capacity_hint(m.telemetry), facts.label)
        out += [idle] if idle is not None else []
    return out


def window_findings(facts: WindowFacts, snapshots: Sequence[MetricSnapshot], *,
                    max_num_seqs_source: str = "", spans: SpanWindow | None = None
                    ) -> list[Finding]:
    """Every rule over one window; ``snapshots`` are the window's scrapes (the gauges' rules
    read them as a load run's). With ``spans`` covering the window's requests, the TTFT split
    is theirs (per request, exact); else the histograms'."""
    source = f"/metrics over {facts.label}"
    if spans is not None and covers(spans, facts):
        split = split_findings(spans.split, facts.label, SPANS_SOURCE)
    else:
        split = split_findings(facts.split, facts.label, HISTOGRAM_SOURCE)
    if not facts.window.has_vllm:
        return [stats_disabled_finding(source)] + split
    gauges = [f for f in findings_from_metrics(
        list(snapshots), source=source, max_num_seqs=facts.max_num_seqs,
        max_num_seqs_source=max_num_seqs_source,
        max_num_batched_tokens=facts.max_num_batched_tokens) if f.id != "server.preemptions"]
    out = split + gauges
    if not any(f.id == "server.queue_max_num_seqs" for f in gauges):
        full = full_batch_by_little(facts, max_num_seqs_source)
        out += [full] if full is not None else []
    out += preemptions(facts) + stalls(facts) + spikes(facts)
    return out


def covers(spans: SpanWindow, facts: WindowFacts) -> bool:
    """The spans hold nearly every request the server finished in the window (else they may
    not represent it: the histograms count them all)."""
    finished = facts.traffic.finished
    return spans.requests > 0 and (not finished or spans.requests >= SPAN_COVERAGE * finished)


def split_findings(split: Split | None, label: str, sources: dict[str, str]) -> list[Finding]:
    """Shares of the mean server TTFT: exact means (histogram sum / count over the window, or
    the spans' per-request values)."""
    if split is None:
        return []
    ctx = Context(measured_at=label)
    parts = dict(split.parts())
    out = []
    for key, row_label, part in _SPLIT_ROWS:
        value = parts.get(part)
        if value is None:
            continue
        found = share_finding(key, row_label, value, sources[part], split.ttft_ms,
                              sources["ttft"], ctx, total_label="server TTFT", target=TARGET)
        if found is not None:
            out.append(found)
    return out


def full_batch_by_little(facts: WindowFacts, seqs_source: str = "") -> Finding | None:
    """The batch at its cap while requests queued, from the histograms: mean running =
    Δ request_inference_time sum / window, mean waiting = Δ request_queue_time sum / window."""
    t, cap = facts.traffic, facts.max_num_seqs
    if cap is None or t.running_mean is None or t.waiting_mean is None:
        return None
    if t.running_mean < FULL_BATCH_MEAN * cap or t.waiting_mean < QUEUE_MEAN_MIN:
        return None
    source = f"/metrics over {facts.label}"
    evidence = [
        Evidence("requests running, mean (Little's law)", round(t.running_mean, 2),
                 f"of max_num_seqs {cap}",
                 f"vllm:request_inference_time_seconds sum increase / {facts.window.seconds:.0f} s"),
        Evidence("requests waiting, mean (Little's law)", round(t.waiting_mean, 2), "reqs",
                 f"vllm:request_queue_time_seconds sum increase / {facts.window.seconds:.0f} s"),
        Evidence("vllm:num_requests_running max", t.running_max, "reqs", source),
        Evidence("vllm:num_requests_waiting max", t.waiting_max, "reqs", source),
        Evidence("max_num_seqs", cap, "", seqs_source or "server command line or log")]
    return full_batch_finding(round(t.running_mean, 1), round(t.waiting_mean, 1), cap, evidence,
                              sustained=True)


def preemptions(facts: WindowFacts) -> list[Finding]:
    count = facts.traffic.preemptions
    if count <= 0:
        return []
    source = f"/metrics over {facts.label}"
    evidence = [Evidence("vllm:num_preemptions_total increase (summed per interval)", count, "",
                         source)]
    if facts.window.seconds > 0:
        evidence.append(Evidence("rate", round(count / facts.window.seconds, 3), "/s", source))
    return [preemption_finding(evidence, count)]


def stalls(facts: WindowFacts) -> list[Finding]:
    if not facts.stalls:
        return []
    worst = max(facts.stalls, key=lambda s: s.seconds)
    total = sum(s.seconds for s in facts.stalls)
    source = f"/metrics over {facts.label}"
    severity = Severity.CRITICAL if worst.seconds >= STALL_CRITICAL_S else Severity.WARNING
    return [Finding(
        "server.stall", severity,
        f"The engine stalled: {worst.in_server:g} requests in the server and no token computed "
        f"for {worst.seconds:.0f} s (from {worst.start_s:.0f} s into the window)",
        evidence=[Evidence("longest stall", round(worst.seconds, 1), "s", source),
                  Evidence("stalls", len(facts.stalls), f"{total:.0f} s in all", source),
                  Evidence("running + waiting at its start", worst.in_server, "reqs", source),
                  Evidence("vllm:generation_tokens_total + prompt_tokens_total increase", 0,
                           "tokens", source)],
        why="Requests waited or ran while the engine produced nothing: every one of them lost "
            "that time, and /health still answers 200 meanwhile.",
        fix="Read the server's log around those seconds (engine core errors, a hung collective "
            "or GPU, a blocked KV transfer); alert on queue time, not /health.",
        reference=f"{REF}#server.stall", layer="queue")]


def spikes(facts: WindowFacts) -> list[Finding]:
    """One finding for the window's TTFT spikes: information, the worst with what bound it."""
    if not facts.spikes:
        return []
    worst = max(facts.spikes, key=lambda s: s.ttft_mean_ms)
    source = f"/metrics over {facts.label}"
    binding = "; ".join(worst.binding) or "no limit of the server's seen binding"
    evidence = [Evidence("spikes", len(facts.spikes), "", source),
                Evidence("worst spike, mean TTFT", round(worst.ttft_mean_ms, 1), "ms",
                         f"{source}, {worst.start_s:.0f}-{worst.end_s:.0f} s"),
                Evidence("median interval, mean TTFT", round(_median_ttft(facts), 1), "ms",
                         source),
                Evidence("binding during it", binding, "", source)]
    if worst.waiting_max is not None:
        evidence.append(Evidence("vllm:num_requests_waiting max during it", worst.waiting_max,
                                 "reqs", source))
    return [Finding(
        "traffic.spike", Severity.INFO,
        f"{len(facts.spikes)} TTFT spike{'s' if len(facts.spikes) > 1 else ''}; the worst, "
        f"{worst.start_s:.0f}-{worst.end_s:.0f} s: mean TTFT {worst.ttft_mean_ms:.0f} ms"
        f"{_queue_words(worst)}; binding: {binding}",
        evidence=evidence,
        why="Intervals whose mean TTFT was at least twice the median interval's: what users "
            "felt at those moments, not the window's mean.",
        fix="Act on what was binding during the spike (the findings above name its fix); "
            "smooth bursts at a gateway, or add replicas for them.",
        reference=f"{REF}#traffic.spike", layer="queue", role="symptom")]


def _queue_words(s: Spike) -> str:
    parts = []
    if s.queue_share is not None and s.queue_share >= 0.01:
        parts.append(f"{min(1.0, s.queue_share):.0%} of it queueing")
    if s.waiting_max:
        parts.append(f"up to {s.waiting_max:g} waiting")
    if s.kv_max is not None and s.kv_max >= KV_FULL:
        parts.append(f"KV at {s.kv_max:.0%}")
    return f" ({', '.join(parts)})" if parts else ""


def _median_ttft(facts: WindowFacts) -> float:
    import statistics

    means = [h.sum / h.count * 1e3 for i in facts.window.intervals
             if (h := i.hists.get("ttft")) is not None and h.count > 0]
    return statistics.median(means) if means else 0.0
