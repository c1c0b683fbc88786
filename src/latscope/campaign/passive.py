"""``conclude_window``: one server's window of live traffic diagnosed from its ``/metrics``
snapshots alone, everything else optional. Pure: the same inputs give the same answer, live
(``diagnose --passive``, ``watch``), replayed (``diagnose --replay``) or rebuilt from Prometheus
range queries (``diagnose --prometheus``: exact step times, no per-scrape latency).

    conclude_window(snapshots, label=..., log=ServerLog, spans=[...], telemetry={...},
                    host_cpu={...}, doctor=DoctorReport, net=NetReport, ...) -> PassiveConclusion

The window's rules are ``latscope.findings.traffic``'s; the merge, the causes' joins, the ranking
and the verdict are the ones every diagnose uses (``findings.rank``, ``findings.causes``,
``findings.verdict``); what a passive verdict adds is said about the real traffic and about what
could not be measured without load (``findings.window_verdict``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

from latscope.analysis.spanwindow import SpanWindow, span_window
from latscope.analysis.traffic import WindowFacts, window_facts
from latscope.findings.causes import as_symptom, join_causes
from latscope.findings.rank import merge, rank
from latscope.findings.server import effective_max_num_seqs, findings_from_log
from latscope.findings.traffic import window_findings
from latscope.findings.window_verdict import verdict_of_window
from latscope.model import Finding, MetricSnapshot, Severity

__all__ = ["PassiveConclusion", "conclude_window"]


@dataclass(frozen=True)
class PassiveConclusion:
    """The diagnosis of one window: ranked findings, the verdict (``report.model.Verdict``'s
    keys), the window's facts, the per-request spans' view when there were spans, notes."""

    ranked: list[Finding]
    verdict: dict[str, Any]
    facts: WindowFacts
    spans: SpanWindow | None = None
    notes: list[str] = field(default_factory=list)


def conclude_window(snapshots: Sequence[MetricSnapshot], *, label: str | None = None,
                    log: Any = None, spans: Sequence[dict[str, Any]] | None = None,
                    telemetry: dict[str, Any] | None = None,
                    host_cpu: dict[str, Any] | None = None, doctor: Any = None, net: Any = None,
                    trace_findings: Sequence[Finding] = (), max_num_seqs: int | None = None,
                    max_num_seqs_source: str = "", max_num_batched_tokens: int | None = None,
                    gpu_util: Sequence[tuple[float, float]] = (),
                    notes: Sequence[str] = ()) -> PassiveConclusion:
    """Diagnose one server's window from its scrapes.

    ``log``: the parsed server log of the window (``server.logs.ServerLog``); ``spans``: OTLP
    spans (``server.otlp_record.read_spans``' dicts); ``telemetry``: ``telemetry.facts.
    telemetry_facts``; ``host_cpu``: ``env.hostload`` of the window; ``doctor`` / ``net``:
    anything with ``findings`` (and doctor's ``facts``); the limits, when known elsewhere (the
    log gives them otherwise); ``gpu_util``: the server's GPUs' ``(wall_time, util_pct)``
    samples (a spike's binding GPU); ``notes``: what the gatherer has to say (failed scrapes
    ...)."""
    seqs, seqs_src, mbt = _limits(log, doctor, max_num_seqs, max_num_seqs_source,
                                  max_num_batched_tokens)
    facts = window_facts(snapshots, label=label or "", max_num_seqs=seqs,
                         max_num_batched_tokens=mbt, gpu_util=gpu_util)
    view = span_window(spans or (), facts.window.start_wall or None,
                       facts.window.end_wall or None) if spans else None
    found = window_findings(facts, snapshots, max_num_seqs_source=seqs_src, spans=view)
    found += _log_findings(log, facts)
    found += _host_and_gpu(facts, telemetry, host_cpu)
    found += _stored(doctor, net) + list(trace_findings)
    merged = [as_symptom(f) for f in merge(found)]
    ranked, rank_notes = rank(join_causes(merged))
    verdict = verdict_of_window(ranked, facts, view)
    all_notes = list(notes) + list(facts.notes) + [f"ranking: {n}" for n in rank_notes]
    return PassiveConclusion(ranked, verdict, facts, view, all_notes)


def _limits(log: Any, doctor: Any, seqs: int | None, seqs_src: str, mbt: int | None
            ) -> tuple[int | None, str, int | None]:
    """max_num_seqs and max_num_batched_tokens: given, else the server's command line (doctor's
    facts), else its log (vLLM's documented defaults by device where the log does not say)."""
    settings = (((getattr(doctor, "facts", None) or {}).get("server") or {})
                .get("settings") or {})
    if seqs is None and isinstance((settings.get("max_num_seqs") or {}).get("value"), int):
        seqs, seqs_src = settings["max_num_seqs"]["value"], settings["max_num_seqs"].get(
            "source", "")
    if seqs is None and log is not None:
        seqs, seqs_src = effective_max_num_seqs(log)
    if mbt is None and log is not None:
        mbt = log.config.get("max_num_batched_tokens")
    value = (settings.get("max_num_batched_tokens") or {}).get("value")
    if mbt is None and isinstance(value, int):
        mbt = value
    return seqs, seqs_src, mbt


def _log_findings(log: Any, facts: WindowFacts) -> list[Finding]:
    """The log's rules over the window's lines; its queue rules yield to the scrapes' (a stats
    line is an instant every 10 s, the counters' deltas cover every request), as in diagnose."""
    if log is None:
        return []
    found = findings_from_log(log)
    return [f for f in found if f.layer != "queue"] if facts.window.has_vllm else found


def _host_and_gpu(facts: WindowFacts, telemetry: dict[str, Any] | None,
                  host_cpu: dict[str, Any] | None) -> list[Finding]:
    from latscope.findings.host import contention_finding
    from latscope.findings.telemetry import capacity_hint, idle_time, telemetry_findings

    out: list[Finding] = []
    if host_cpu:
        found = contention_finding(host_cpu, facts.label)
        out += [found] if found is not None else []
    if telemetry:
        out += telemetry_findings(telemetry)
        idle = idle_time(capacity_hint(telemetry), facts.label)
        out += [idle] if idle is not None else []
    return out


def _stored(doctor: Any, net: Any) -> list[Finding]:
    """doctor's and net's findings, as diagnose takes them: doctor's since-start TTFT split
    left out (the window's own split says it for this window), the probe's observations as
    information, and nothing that passed or was skipped."""
    keep = (Severity.OK, Severity.SKIPPED)
    out = [f for f in getattr(doctor, "findings", None) or []
           if f.severity not in keep and not f.id.startswith("latency.")]
    out += [dataclasses.replace(f, severity=min(f.severity, Severity.INFO, key=lambda v: -v.rank))
            for f in getattr(net, "findings", None) or []
            if f.id != "net.verdict" and f.severity not in keep]
    return out
