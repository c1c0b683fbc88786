"""The one seam of every conclusion: typed facts in (``findings.inputs``), ranked findings and
one verdict out.

``conclude(inputs)`` calls every rule itself: each layer's findings at each named load (the
server's counters, the TTFT split, the host's CPUs, GPU telemetry, prompts the server had seen),
the log's, the trace's, doctor's and net's as this run weighs them (the demotions below), the
A/B proofs as evidence; then one finding per id, causes joined to the symptoms they explain
(``findings.causes``), the capacity verdict where no limit was binding (``findings.capacity``),
the ranking and the verdict (``findings.verdict``). Pure: the same inputs give the same answer,
live or replayed; diagnose, its replay and bench build the inputs and call it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from latscope.findings.abtest import with_proof
from latscope.findings.capacity import GpuBusy, Point, capacity_finding
from latscope.findings.causes import ACTING, as_symptom, causes_of, join_causes
from latscope.findings.fleet import fleet_findings, fleet_healthy
from latscope.findings.host import contention_finding
from latscope.findings.inputs import ConclusionInputs, Measured, ServerLimits
from latscope.findings.latency import Context, findings_from_decomposition
from latscope.findings.limits import limit_readings
from latscope.findings.rank import merge, rank
from latscope.findings.server import findings_from_log, findings_from_metrics
from latscope.findings.servermetrics import resent_prompts
from latscope.findings.telemetry import (
    CapacityHint,
    capacity_hint,
    idle_time,
    telemetry_findings,
)
from latscope.findings.trace import trace_findings_of
from latscope.findings.trade import budget_trade
from latscope.findings.traffic import traffic_findings
from latscope.findings.verdict import HealthySplit, VerdictInputs, verdict
from latscope.findings.window_verdict import verdict_of_window
from latscope.model import Evidence, Finding, Severity
from latscope.results import ClientSection, Verdict


@dataclass(frozen=True)
class Conclusion:
    """The ranked findings (most severe first), the verdict, the client's reliability at the
    load the verdict rests on, and notes on the ranking (findings measured on different
    targets or loads)."""

    ranked: list[Finding]
    verdict: Verdict
    client: ClientSection = field(default_factory=ClientSection)
    notes: tuple[str, ...] = ()


def conclude(inputs: ConclusionInputs) -> Conclusion:
    merged = [as_symptom(f) for f in merge(_all_findings(inputs) + _telemetry_idle(inputs))]
    merged = _with_decode_cost(merged, inputs)
    merged += _trade(inputs, merged)
    capacity = _capacity(inputs, merged)
    if capacity is not None:
        merged.append(capacity)
    for exp in inputs.experiments:
        merged = [with_proof(f, exp) if f.id == exp.finding_id else f for f in merged]
    ranked, notes = rank(join_causes(merged))
    if inputs.traffic is not None:  # a passive window: the verdict said of its real traffic
        return Conclusion(ranked, verdict_of_window(ranked, inputs.traffic, inputs.spans),
                          notes=tuple(notes))
    healthy = healthy_split(inputs)
    result = verdict(ranked, VerdictInputs(list(inputs.experiments), list(inputs.proposals),
                                           healthy, _checks_read(inputs)))
    return Conclusion(ranked, result, _client(inputs), tuple(notes))


# --- the findings at one load ----------------------------------------------------------------

def findings_at(m: Measured, same_host: bool | None = None,
                limits: ServerLimits | None = None, *, scraped: bool = True) -> list[Finding]:
    """Every rule over what was measured at one load: the TTFT split's shares, the server's
    /metrics (``scraped``: its rules ran; a run that scraped nothing has none), the host's
    CPUs, GPU telemetry and prompts the server had seen (bench's findings and each of
    diagnose's named loads alike)."""
    client = m.client
    ctx = Context(measured_at=m.label, load=m.load, same_host=same_host,
                  client_reliable=client.reliable if client else True,
                  client_why=client.why if client else "")
    out: list[Finding] = []
    if m.decomposition is not None:
        out += findings_from_decomposition(m.decomposition, ctx)
    limits = limits or ServerLimits()
    if scraped:
        out += findings_from_metrics(
            list(m.snapshots), source=m.source or f"/metrics at {m.label}",
            max_num_seqs=limits.max_num_seqs, max_num_seqs_source=limits.max_num_seqs_source,
            max_num_batched_tokens=limits.max_num_batched_tokens)
    contention = contention_finding(m.cpu, m.label or "this run")
    if contention is not None:
        out.append(contention)
    if m.telemetry is not None:
        out += telemetry_findings(m.telemetry)
    if m.prompts is not None:
        out += resent_prompts(m.prompts.hit_rate, m.prompts.drawn_to_share,
                              m.prompts.seed or 0, m.source or f"/metrics at {m.label}")
    return out


def _named(inputs: ConclusionInputs) -> list[Measured]:
    """The measured loads the conclusion speaks of: light, the knee, the top (each once)."""
    return [m for load in dict.fromkeys(inputs.levels.named().values())
            if (m := inputs.at(load)) is not None]


def _all_findings(inputs: ConclusionInputs) -> list[Finding]:
    at_levels = [f for m in _named(inputs)
                 for f in findings_at(m, inputs.same_host, inputs.limits)]
    return (_doctor(inputs) + _net(inputs) + at_levels + _log(inputs) + _trace(inputs)
            + traffic_findings(inputs)
            + (fleet_findings(inputs.fleet) if inputs.fleet is not None else []))


def _doctor(inputs: ConclusionInputs) -> list[Finding]:
    """doctor's findings as this run weighs them."""
    if inputs.doctor is None:
        return []
    found = [f for f in inputs.doctor.findings if f.severity not in (Severity.OK, Severity.SKIPPED)]
    if inputs.trace is not None and inputs.trace.profiled:
        # diagnose's own --profile needs the profiler on; idle, it costs nothing
        found = [_needed_for_profile(f) if f.id == "server.profiler" else f for f in found]
    if any(m.decomposition is not None for m in inputs.measured) or inputs.traffic is not None:
        # doctor's TTFT split covers every request since the server started (another run's
        # load included: an H200 reused for a light-load run got the saturated run's API-server
        # share as its verdict); the measured steps' own splits say it for this run
        found = [f for f in found if not f.id.startswith("latency.")]
    if not inputs.doctor.gpu_vendor:
        found = [_no_gpu_here(f) if f.layer == "gpu" else f for f in found]
    return found


def _net(inputs: ConclusionInputs) -> list[Finding]:
    """The probe's own observations are information here: the measured run's split
    (latency.network) says what the network costs the load; net.verdict is that, for the
    probe alone."""
    return [dataclasses.replace(f, severity=min(f.severity, Severity.INFO, key=lambda v: -v.rank))
            for f in inputs.net_findings
            if f.id != "net.verdict" and f.severity not in (Severity.OK, Severity.SKIPPED)]


def _log(inputs: ConclusionInputs) -> list[Finding]:
    found = (findings_from_log(inputs.log) if inputs.log is not None
             else list(inputs.stored_log_findings))
    if any(m.snapshots for m in inputs.measured):
        # the log's stats lines span the whole run (warm-up, ramps between steps); the scrapes
        # of each measured step are the evidence for queueing, so the log's queue rules yield
        found = [f for f in found if f.layer != "queue"]
    return found


def _trace(inputs: ConclusionInputs) -> list[Finding]:
    """The trace's findings, measured where the profile ran: a profile diagnose took is of
    the knee's load (the trace file's name says nothing to a reader of the verdict)."""
    if inputs.trace is None:
        return []
    found = trace_findings_of(inputs.trace.analysis)
    load = inputs.trace.load
    if not inputs.trace.profiled or load is None:
        return found
    where = inputs.levels.label(load)
    return [dataclasses.replace(f, impact={**f.impact, "measured_at": where}) if f.impact else f
            for f in found]


def _needed_for_profile(f: Finding) -> Finding:
    return dataclasses.replace(f, severity=Severity.INFO,
                               why=f.why + " diagnose --profile needs it for its profile; drop it "
                               "in production.")


def _no_gpu_here(f: Finding) -> Finding:
    """A GPU setting on a host without a GPU (the CPU build) costs nothing that can be measured
    here: kept, with that said, as information."""
    if f.severity.rank >= Severity.INFO.rank:
        return f
    return dataclasses.replace(
        f, severity=Severity.INFO,
        why=(f.why + " " if f.why else "") + "This host has no GPU, so its cost could not be "
        "measured here; on a GPU server it applies as stated.")


def _trade(inputs: ConclusionInputs, findings: list[Finding]) -> list[Finding]:
    """A token budget set on the command line, where it did not bind: the trade it makes,
    read at the load the verdict reports."""
    binding = any(f.id == "server.queue_token_budget" and f.severity in ACTING
                  for f in findings)
    m = inputs.at(inputs.levels.verdict_load() or inputs.levels.light)
    found = budget_trade(m, inputs.limits, binding) if m is not None else None
    return [found] if found is not None else []


# --- capacity and the GPU ----------------------------------------------------------------------

def _capacity(inputs: ConclusionInputs, findings: list[Finding]) -> Finding | None:
    points = [Point(m.load, m.throughput.requests_per_s, m.throughput.output_tokens_per_s)
              for m in inputs.measured if m.load is not None]
    levels = inputs.levels
    at = levels.verdict_load()
    label = levels.label(at) if at is not None else "the highest load measured"
    split = healthy_split(inputs)
    # a cause of GPU idle time found means the GPU waited for the host: not saturated
    if inputs.trace is not None and any(
            f.id in causes_of("trace.gpu_idle") and f.severity.rank <= Severity.WARNING.rank
            and f.layer != "host" for f in findings):
        return None
    return capacity_finding(points, levels.knee, levels.recommended, findings, _gpu_busy(inputs),
                            split.split if split else "not measured", label)


def _gpu_busy(inputs: ConclusionInputs) -> GpuBusy | None:
    """The GPU telemetry's utilisation at the knee (NVML / amdsmi) where it was sampled, else
    1 - idle share of the profile's first device (``trace.json``), at the load profiled. The
    telemetry first: a profile is taken under the profiler, which on an H200 at c=64 halved
    the output tokens/s (6,039 -> 3,132) and took NVML's utilisation from 82% to 47%, while the
    profile and NVML agreed over the same seconds (47% and 47%; docs/telemetry.md)."""
    telemetry = _telemetry_busy(inputs)
    trace = inputs.trace
    if telemetry is not None or trace is None or not trace.analysis.devices:
        return telemetry
    load = trace.load if trace.load is not None else inputs.levels.light
    where = inputs.levels.label(load) if load is not None else "the profiled load"
    source = trace.analysis.source.path or "trace.json"
    return GpuBusy(1.0 - trace.analysis.devices[0].breakdown.idle_share, where, source)


def _telemetry_at_verdict_load(inputs: ConclusionInputs) -> tuple[CapacityHint, str] | None:
    load = inputs.levels.verdict_load()
    m = inputs.at(load)
    if m is None or load is None or m.telemetry is None:
        return None
    hint = capacity_hint(m.telemetry)
    return (hint, inputs.levels.label(load)) if hint else None


def _telemetry_busy(inputs: ConclusionInputs) -> GpuBusy | None:
    found = _telemetry_at_verdict_load(inputs)
    if found is None:
        return None
    hint, where = found
    return GpuBusy(hint.gpu_busy_pct / 100.0, where, hint.source, kind="telemetry")


def _telemetry_idle(inputs: ConclusionInputs) -> list[Finding]:
    """The GPU's idle time at the knee from its telemetry, where no profile says it (a profile's
    ``trace.gpu_idle`` is the same symptom, its window's): H200 with --enforce-eager, no
    profile, was HEALTHY with eager mode only "to check" while NVML read 26-31% busy."""
    if inputs.trace is not None:
        return []
    found = _telemetry_at_verdict_load(inputs)
    idle = idle_time(found[0], found[1]) if found else None
    return [idle] if idle is not None else []


def _with_decode_cost(findings: list[Finding], inputs: ConclusionInputs) -> list[Finding]:
    """Eager mode and launch blocking cost every decode step: the ITL at light load joins their
    evidence, so the verdict states it (13 ms against 5 ms with graphs on an H200)."""
    light = inputs.levels.light
    m = inputs.at(light)
    if m is None or m.itl_p50_ms is None or light is None:
        return findings
    ev = Evidence(f"ITL p50 at {inputs.levels.label(light)}", round(float(m.itl_p50_ms), 2),
                  "ms", "the sweep's run")
    return [dataclasses.replace(f, evidence=f.evidence + [ev])
            if f.id in DECODE_COST and f.severity.rank <= Severity.WARNING.rank else f
            for f in findings]


DECODE_COST = ("server.enforce_eager", "gpu.launch_blocking", "gpu.serialize")


# --- what a healthy verdict, and the client section, report ------------------------------------

def healthy_split(inputs: ConclusionInputs) -> HealthySplit | None:
    """Where the TTFT goes at the knee (or the highest load, or light load): the figures a
    healthy or at-capacity verdict reports, from one run."""
    if inputs.fleet is not None:  # the fleet's rate and TTFT over its window
        return fleet_healthy(inputs.fleet)
    levels = inputs.levels
    load = levels.knee or levels.top or levels.light
    m = inputs.at(load)
    if m is None or m.decomposition is None or load is None:
        return None
    d = m.decomposition
    ttft = d.component("ttft")
    if ttft is None or not ttft.mean_ms:
        return None
    total_ms = ttft.mean_ms
    parts = sorted((c for c in d.components if c.key in TTFT_LEAVES and c.mean_ms
                    and c.mean_ms > 0), key=lambda c: -(c.mean_ms or 0))
    # a remainder can exceed its total where the parts disagree: no share above 100% is shown
    split = ", ".join(f"{c.label} {(c.mean_ms or 0) / total_ms:.0%}" for c in parts[:3]
                      if (c.mean_ms or 0) <= total_ms)
    return HealthySplit(levels.label(load), total_ms, split, m.throughput.requests_per_s)


TTFT_LEAVES = ("ttft.client", "ttft.network", "ttft.frontend", "ttft.server.queue",
               "ttft.server.prefill", "ttft.server.other")


def _client(inputs: ConclusionInputs) -> ClientSection:
    """The client's reliability at the level the verdict rests on (the least reliable one)."""
    rows = [(m.client, m.load) for m in inputs.measured if m.client is not None]
    if not rows:
        return ClientSection()
    worst, load = min(rows, key=lambda r: (r[0].reliable, -(r[0].loop_lag_p99_ms or 0)))
    return worst.section(load, inputs.same_host)


def _checks_read(inputs: ConclusionInputs) -> list[str]:
    """What the server's own limits read where queueing was measured, for a verdict that must
    say which checks it ran when none of them named the limit (never a finding that is not
    there)."""
    load = inputs.levels.verdict_load() or inputs.levels.light
    m = inputs.at(load)
    return limit_readings(m, inputs.limits, _gpu_busy(inputs)) if m is not None else []

