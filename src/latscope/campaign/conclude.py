"""From what diagnose gathered to a verdict: every layer's findings at each named load (the
server's counters, the TTFT split, the host's CPUs, the log, the trace, doctor and net), merged
one per id, causes joined to the symptoms they explain (``findings.causes``), the capacity
verdict where no limit was binding (``findings.capacity``), ranked, and the verdict
(``findings.verdict``). Pure: the same state gives the same answer, live or replayed."""

from __future__ import annotations

import dataclasses
from typing import Any

from latscope.campaign.observe import resent_finding
from latscope.campaign.state import Diagnosis, level_label
from latscope.env.hostload import read_cpu_usage
from latscope.findings.capacity import GpuBusy, Point, capacity_finding
from latscope.findings.causes import as_symptom, causes_of, join_causes
from latscope.findings.host import contention_finding
from latscope.findings.impact import ab_impact, severity_for_share
from latscope.findings.latency import Context, findings_from_decomposition
from latscope.findings.rank import merge, rank
from latscope.findings.server import findings_from_metrics
from latscope.findings.telemetry import capacity_hint, idle_time, telemetry_findings
from latscope.findings.verdict import VerdictInputs, experiment_text, verdict
from latscope.model import Finding, Severity
from latscope.telemetry.facts import telemetry_facts


def server_limits(state: Diagnosis) -> tuple[int | None, str, int | None]:
    """max_num_seqs (and its source) and max_num_batched_tokens: the server's command line,
    else its log (with vLLM's documented defaults by device when the log does not say)."""
    seqs, seqs_src = state.max_num_seqs
    mbt = None
    if state.log is not None:
        from latscope.findings.server import effective_max_num_seqs

        if seqs is None:
            seqs, seqs_src = effective_max_num_seqs(state.log)
        mbt = state.log.config.get("max_num_batched_tokens")
    if mbt is None and state.doctor is not None:
        settings = (state.doctor.facts.get("server") or {}).get("settings") or {}
        value = (settings.get("max_num_batched_tokens") or {}).get("value")
        mbt = value if isinstance(value, int) else None
    return seqs, seqs_src, mbt


def _level_findings(state: Diagnosis) -> list[Finding]:
    """Latency and /metrics findings at each named level, labelled with where they were measured."""
    out: list[Finding] = []
    seqs, seqs_src, mbt = server_limits(state)
    for load in dict.fromkeys(state.levels.values()):
        obs = state.observations.get(load)
        if obs is None:
            continue
        label = level_label(state, load)
        ctx = Context(measured_at=label, same_host=state.same_host,
                      client_reliable=obs.client["reliable"], client_why=obs.client["why"])
        if obs.decomposition is not None:
            out += findings_from_decomposition(obs.decomposition, ctx)
        out += findings_from_metrics(obs.snapshots, source=f"/metrics at {label}",
                                     max_num_seqs=seqs, max_num_seqs_source=seqs_src,
                                     max_num_batched_tokens=mbt)
        contention = contention_finding(read_cpu_usage(obs.run_dir), label)
        if contention is not None:
            out.append(contention)
        out += telemetry_findings(telemetry_facts(obs.run_dir))
        out += resent_finding(obs.result, obs.prefix_cache_hit_rate, f"/metrics at {label}")
    return out


def _all_findings(state: Diagnosis) -> list[Finding]:
    doctor = [f for f in (state.doctor.findings if state.doctor else [])
              if f.severity not in (Severity.OK, Severity.SKIPPED)]
    if state.opts.profile:  # diagnose's own --profile needs it; idle, it costs nothing
        doctor = [_needed_for_profile(f) if f.id == "server.profiler" else f for f in doctor]
    if any(o.decomposition is not None for o in state.observations.values()):
        # doctor's TTFT split covers every request since the server started (another run's
        # load included: an H200 reused for a light-load run got the saturated run's API-server
        # share as its verdict); the measured steps' own splits say it for this run
        doctor = [f for f in doctor if not f.id.startswith("latency.")]
    if state.doctor is not None and not (state.doctor.facts.get("gpu") or {}).get("vendor"):
        doctor = [_no_gpu_here(f) if f.layer == "gpu" else f for f in doctor]
    # The probe's own observations are information here: the measured run's split
    # (latency.network) says what the network costs the load; net.verdict is that, for the probe.
    net = [dataclasses.replace(f, severity=min(f.severity, Severity.INFO, key=lambda v: -v.rank))
           for f in (state.net.findings if state.net else [])
           if f.id != "net.verdict" and f.severity not in (Severity.OK, Severity.SKIPPED)]
    log = state.log_findings
    if any(o.snapshots for o in state.observations.values()):
        # The log's stats lines span the whole run (warm-up, ramps between steps); the scrapes
        # of each measured step are the evidence for queueing, so the log's queue rules yield.
        log = [f for f in log if f.layer != "queue"]
    return doctor + net + _level_findings(state) + log + _profiled(state)


def _profiled(state: Diagnosis) -> list[Finding]:
    """The trace's findings, measured where the profile ran: a profile diagnose took is of
    the knee's load (the trace file's name says nothing to a reader of the verdict)."""
    load = state.levels.get("knee") or state.levels.get("light")
    if not state.opts.profile or load is None:
        return state.trace_findings
    where = level_label(state, load)
    return [dataclasses.replace(f, impact={**f.impact, "measured_at": where}) if f.impact else f
            for f in state.trace_findings]


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


def conclude(state: Diagnosis) -> None:
    """Findings, ranking and verdict into ``state`` (``ranked``, ``verdict``, ``client``)."""
    merged = [as_symptom(f) for f in merge(_all_findings(state) + _telemetry_idle(state))]
    _add_decode_cost(merged, state)
    capacity = _capacity(state, merged)
    if capacity is not None:
        merged.append(capacity)
    for exp in state.experiments:
        _annotate(merged, exp)
    ranked, notes = rank(join_causes(merged))
    state.ranked = ranked
    state.notes = [n for n in state.notes if not n.startswith("ranking: ")] + \
                  [f"ranking: {n}" for n in notes]
    state.client = _client(state)
    state.verdict = verdict(ranked, VerdictInputs(state.experiments, state.proposals,
                                                  healthy_split(state)))


def _capacity(state: Diagnosis, findings: list[Finding]) -> Finding | None:
    points = [Point(s.load, s.metrics.get("requests_per_s") or 0.0,
                    s.metrics.get("output_tokens_per_s")) for s in state.steps]
    a = state.analysis
    knee = state.levels.get("knee")
    at = knee if knee is not None else state.levels.get("top")
    label = level_label(state, at) if at is not None else "the highest load measured"
    split = (healthy_split(state) or {}).get("split", "not measured")
    # a cause of GPU idle time found means the GPU waited for the host: not saturated
    if any(f.id in causes_of("trace.gpu_idle") and f.severity.rank <= Severity.WARNING.rank
           and f.layer != "host" for f in findings if state.trace):
        return None
    return capacity_finding(points, knee, a.recommended if a else None, findings,
                            _gpu_busy(state), split, label)


def _gpu_busy(state: Diagnosis) -> GpuBusy | None:
    """The GPU telemetry's utilisation at the knee (NVML / amdsmi) where it was sampled, else
    1 - idle share of the profile's first device (``trace.json``), at the load profiled. The
    telemetry first: a profile is taken under the profiler, which on an H200 at c=64 halved
    the output tokens/s (6,039 -> 3,132) and took NVML's utilisation from 82% to 47%, while the
    profile and NVML agreed over the same seconds (47% and 47%; docs/telemetry.md)."""
    telemetry = _telemetry_busy(state)
    devices = (state.trace or {}).get("devices") or []
    b = (devices[0].get("breakdown") or {}) if devices else {}
    if telemetry is not None or b.get("idle_share") is None:
        return telemetry
    load = state.levels.get("knee") or state.levels.get("light")
    where = level_label(state, load) if load is not None else "the profiled load"
    source = ((state.trace or {}).get("source") or {}).get("path") or "trace.json"
    return GpuBusy(1.0 - float(b["idle_share"]), where, source)


def _telemetry_idle(state: Diagnosis) -> list[Finding]:
    """The GPU's idle time at the knee from its telemetry, where no profile says it (a profile's
    ``trace.gpu_idle`` is the same symptom, its window's): H200 with --enforce-eager, no
    profile, was HEALTHY with eager mode only "to check" while NVML read 26-31% busy."""
    if state.trace:
        return []
    load = state.levels.get("knee") or state.levels.get("top")
    obs = state.observations.get(load) if load is not None else None
    if obs is None or load is None:
        return []
    found = idle_time(capacity_hint(telemetry_facts(obs.run_dir)), level_label(state, load))
    return [found] if found is not None else []


def _telemetry_busy(state: Diagnosis) -> GpuBusy | None:
    load = state.levels.get("knee") or state.levels.get("top")
    obs = state.observations.get(load) if load is not None else None
    hint = capacity_hint(telemetry_facts(obs.run_dir)) if obs is not None else None
    if not hint or load is None:
        return None
    return GpuBusy(hint["gpu_busy_pct"] / 100.0, level_label(state, load), hint["source"],
                   kind="telemetry")


def _add_decode_cost(findings: list[Finding], state: Diagnosis) -> None:
    """Eager mode and launch blocking cost every decode step: the ITL at light load joins their
    evidence, so the verdict states it (13 ms against 5 ms with graphs on an H200)."""
    from latscope.model import Evidence

    light = state.levels.get("light")
    step = next((s for s in state.steps if s.load == light), None)
    itl = (step.metrics.get("itl_p50_ms") if step else None)
    if itl is None or light is None:
        return
    for f in findings:
        if f.id in ("server.enforce_eager", "gpu.launch_blocking", "gpu.serialize") \
                and f.severity.rank <= Severity.WARNING.rank:
            f.evidence = f.evidence + [Evidence(f"ITL p50 at {level_label(state, light)}",
                                                round(float(itl), 2), "ms", "the sweep's run")]


def _annotate(findings: list[Finding], exp: dict[str, Any]) -> None:
    """The A/B as evidence of its finding; a fix that helped also gives a finding whose cost no
    run measured its share: what the fix took off the metric (the H200's --enforce-eager: 78% of
    TPOT), so that it ranks, and is worded, as a measured cause."""
    from latscope.model import Evidence

    for i, f in enumerate(findings):
        if f.id != exp["finding_id"]:
            continue
        text = experiment_text(exp)
        f = dataclasses.replace(f, evidence=f.evidence + [Evidence(
            "A/B: " + exp["change"], text, "", f"diagnose prove stage ({len(exp['arms'])} runs)")])
        impact = ab_impact(exp)
        if impact is not None and (f.impact or {}).get("share") is None:
            worst = min(f.severity, severity_for_share(impact["share"]), key=lambda v: v.rank)
            f = dataclasses.replace(f, impact=impact, severity=worst)
        findings[i] = f


def _client(state: Diagnosis) -> dict[str, Any]:
    """The client's reliability at the level the verdict rests on (the least reliable one)."""
    rows = [o.client | {"load": load} for load, o in state.observations.items()]
    if not rows:
        return {}
    worst = min(rows, key=lambda r: (r["reliable"], -(r.get("loop_lag_p99_ms") or 0)))
    return {**worst, "same_host": state.same_host}


def healthy_split(state: Diagnosis) -> dict[str, Any] | None:
    """Where the TTFT goes at the knee (or the highest load, or light load): the figures a
    healthy or at-capacity verdict reports, from one run."""
    load = state.levels.get("knee") or state.levels.get("top") or state.levels.get("light")
    obs = state.observations.get(load) if load is not None else None
    if obs is None or obs.decomposition is None or load is None:
        return None
    d = obs.decomposition
    ttft = d.component("ttft")
    if ttft is None or not ttft.mean_ms:
        return None
    total_ms = ttft.mean_ms
    parts = sorted((c for c in d.components if c.key in _TTFT_LEAVES and c.mean_ms
                    and c.mean_ms > 0), key=lambda c: -(c.mean_ms or 0))
    # a remainder can exceed its total where the parts disagree: no share above 100% is shown
    split = ", ".join(f"{c.label} {(c.mean_ms or 0) / total_ms:.0%}" for c in parts[:3]
                      if (c.mean_ms or 0) <= total_ms)
    return {"where": level_label(state, load), "ttft_ms": ttft.mean_ms, "split": split,
            "rps": obs.summary.get("throughput", {}).get("requests_per_s") or 0.0}


_TTFT_LEAVES = ("ttft.client", "ttft.network", "ttft.frontend", "ttft.server.queue",
                "ttft.server.prefill", "ttft.server.other")
