"""``conclude_window``: one server's window of live traffic diagnosed from its ``/metrics``
snapshots alone, everything else optional. Pure: the same inputs give the same answer, live
(``diagnose --passive``, ``watch``), replayed (``diagnose --replay``) or rebuilt from Prometheus
range queries (``diagnose --prometheus``: exact step times, no per-scrape latency).

    conclude_window(snapshots, label=..., log=ServerLog, spans=[Span], telemetry=TelemetryFacts,
                    host_cpu=HostCpu, doctor=DoctorReport, net=NetReport, ...) -> PassiveConclusion

It only gathers: the window's facts (``analysis.traffic``) and the rest as the typed inputs of
the one seam, ``findings.conclude.conclude`` (kind "passive"), which calls the window's rules
(``findings.traffic``), weighs doctor, the log and the trace as every diagnose does, joins
causes, ranks, and gives the verdict, said about the real traffic and about what could not be
measured without load (``findings.window_verdict``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from latscope.analysis.spanwindow import SpanWindow, span_window
from latscope.analysis.traffic import WindowFacts, window_facts
from latscope.findings import conclude as seam
from latscope.findings.inputs import (
    ConclusionInputs,
    DoctorFacts,
    Measured,
    ServerLimits,
    TraceFacts,
)
from latscope.findings.server import effective_max_num_seqs
from latscope.model import Finding, MetricSnapshot
from latscope.results import Verdict

if TYPE_CHECKING:
    from latscope.env.hostload import HostCpu
    from latscope.server.otlp_decode import Span
    from latscope.telemetry.facts import TelemetryFacts
    from latscope.trace.files import StoredTrace

__all__ = ["PassiveConclusion", "conclude_window"]


@dataclass(frozen=True)
class PassiveConclusion:
    """The diagnosis of one window: ranked findings, the verdict (``results.Verdict``, the one
    every diagnose gives), the window's facts, the per-request spans' view when there were
    spans, notes."""

    ranked: list[Finding]
    verdict: Verdict
    facts: WindowFacts
    spans: SpanWindow | None = None
    notes: list[str] = field(default_factory=list)


def conclude_window(snapshots: Sequence[MetricSnapshot], *, label: str | None = None,
                    log: Any = None, spans: Sequence[Span] | None = None,
                    telemetry: TelemetryFacts | None = None,
                    host_cpu: HostCpu | None = None, doctor: Any = None,
                    net: Any = None, trace: StoredTrace | None = None,
                    profiled: bool = False, same_host: bool | None = None,
                    max_num_seqs: int | None = None, max_num_seqs_source: str = "",
                    max_num_batched_tokens: int | None = None,
                    gpu_util: Sequence[tuple[float, float]] = (),
                    notes: Sequence[str] = ()) -> PassiveConclusion:
    """Diagnose one server's window from its scrapes (``findings.conclude``, kind "passive").

    ``log``: the parsed server log of the window (``server.logs.ServerLog``); ``spans``: OTLP
    spans (``server.otlp_record.read_spans``); ``telemetry``: ``telemetry.facts.
    telemetry_facts``; ``host_cpu``: ``env.hostload.read_cpu_usage`` of the window; ``doctor``: its report
    (``findings`` and ``facts``) or ``findings.inputs.DoctorFacts``; ``net``: anything with
    ``findings``; ``trace``: a stored trace analysis (``trace.json``), ``profiled`` when it is
    of the window's traffic; the limits, when known elsewhere (the doctor's command line and the
    log give them otherwise); ``gpu_util``: the server's GPUs' ``(wall_time, util_pct)``
    samples (a spike's binding GPU); ``notes``: what the gatherer has to say."""
    limits = _limits(log, doctor, max_num_seqs, max_num_seqs_source, max_num_batched_tokens)
    facts = window_facts(snapshots, label=label or "", max_num_seqs=limits.max_num_seqs,
                         max_num_batched_tokens=limits.max_num_batched_tokens,
                         gpu_util=gpu_util)
    view = span_window(spans or (), facts.window.start_wall or None,
                       facts.window.end_wall or None) if spans else None
    answer = seam.conclude(ConclusionInputs(
        kind="passive",
        measured=(Measured(label=facts.label, snapshots=tuple(snapshots), cpu=host_cpu,
                           telemetry=telemetry, source=f"/metrics over {facts.label}"),),
        limits=limits, same_host=same_host, doctor=_doctor(doctor),
        net_findings=tuple(getattr(net, "findings", None) or ()), log=log,
        trace=TraceFacts(trace, profiled=profiled) if trace else None,
        traffic=facts, spans=view))
    all_notes = list(notes) + list(facts.notes) + [f"ranking: {n}" for n in answer.notes]
    return PassiveConclusion(answer.ranked, answer.verdict, facts, view, all_notes)


def _limits(log: Any, doctor: Any, seqs: int | None, seqs_src: str, mbt: int | None
            ) -> ServerLimits:
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
    return ServerLimits(seqs, seqs_src, mbt)


def _doctor(doctor: Any) -> DoctorFacts | None:
    if doctor is None or isinstance(doctor, DoctorFacts):
        return doctor
    gpu = (getattr(doctor, "facts", None) or {}).get("gpu") or {}
    return DoctorFacts(tuple(doctor.findings), gpu.get("vendor"))
