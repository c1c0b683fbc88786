"""diagnose's conclusion: what every stage gathered, as the typed inputs of the one seam
(``findings.conclude``), and its answer put back into the ``Diagnosis``. Every rule, cap,
demotion and the verdict are decided there; this module only gathers (live and replayed alike).
"""

from __future__ import annotations

from typing import Any

from latscope.campaign.state import Diagnosis
from latscope.findings import conclude as seam
from latscope.findings.inputs import (
    ConclusionInputs,
    DoctorFacts,
    Levels,
    Measured,
    PromptReuse,
    ServerLimits,
    Throughput,
    TraceFacts,
)


def conclude(state: Diagnosis) -> None:
    """Findings, ranking and verdict into ``state`` (``ranked``, ``verdict``, ``client``)."""
    answer = seam.conclude(inputs_of(state))
    state.ranked = answer.ranked
    state.verdict = answer.verdict
    state.client = answer.client
    state.notes = [n for n in state.notes if not n.startswith("ranking: ")] + \
                  [f"ranking: {n}" for n in answer.notes]


def inputs_of(state: Diagnosis) -> ConclusionInputs:
    levels = levels_of(state)
    return ConclusionInputs(
        kind="load", measured=tuple(_measured(state, load, levels) for load in
                                    sorted(state.observations)),
        levels=levels, limits=server_limits(state), same_host=state.same_host,
        doctor=_doctor(state), net_findings=tuple(state.net.findings if state.net else ()),
        log=state.log, stored_log_findings=tuple(state.log_findings), trace=_trace(state),
        experiments=tuple(state.experiments), proposals=tuple(state.proposals),
        slo=state.opts.slo)


def levels_of(state: Diagnosis) -> Levels:
    a = state.analysis
    return Levels(light=state.levels.get("light"), knee=state.levels.get("knee"),
                  top=state.levels.get("top"), recommended=a.recommended if a else None)


def _measured(state: Diagnosis, load: float, levels: Levels) -> Measured:
    """One sweep step's facts, each read once by the observation that measured it."""
    obs = state.observations[load]
    step = next((s for s in state.steps if s.load == load), None)
    throughput = obs.summary.throughput
    metrics = step.metrics if step is not None else {}
    rps = metrics.get("requests_per_s") if step is not None else throughput.requests_per_s
    cfg = obs.result.config
    workload = getattr(cfg, "workload", None)
    shares = bool(getattr(workload, "prefix_len", 0) or getattr(workload, "dataset", None)) \
        or getattr(cfg, "endpoint", "completions") != "completions"
    label = levels.label(load)
    return Measured(
        label=label, load=load, decomposition=obs.decomposition,
        snapshots=tuple(obs.snapshots), cpu=obs.cpu, telemetry=obs.telemetry,
        client=obs.client,
        prompts=PromptReuse(obs.prefix_cache_hit_rate, shares, getattr(cfg, "seed", None)),
        throughput=Throughput(rps or 0.0, metrics.get("output_tokens_per_s")
                              if step is not None else throughput.output_tokens_per_s,
                              throughput.total_tokens_per_s),
        itl_p50_ms=metrics.get("itl_p50_ms"), source=f"/metrics at {label}")


def server_limits(state: Diagnosis) -> ServerLimits:
    """max_num_seqs (and its source) and max_num_batched_tokens: the server's command line,
    else its log (with vLLM's documented defaults by device when the log does not say); and
    the budget the server was started with, where its command line says."""
    from latscope.findings.fixes import flag_value
    from latscope.findings.server import effective_max_num_seqs

    seqs, seqs_src = state.max_num_seqs
    mbt = None
    if state.log is not None:
        if seqs is None:
            seqs, seqs_src = effective_max_num_seqs(state.log)
        mbt = state.log.config.get("max_num_batched_tokens")
    settings: dict[str, Any] = {}
    if state.doctor is not None:
        settings = (state.doctor.facts.get("server") or {}).get("settings") or {}
    if mbt is None:
        value = (settings.get("max_num_batched_tokens") or {}).get("value")
        mbt = value if isinstance(value, int) else None
    argv = list(state.target.get("server_args") or [])
    if state.doctor is not None:
        argv = argv or list(state.doctor.facts.get("cmdline") or [])
    budget = flag_value(argv, "--max-num-batched-tokens")
    return ServerLimits(seqs, seqs_src, mbt,
                        int(budget) if budget is not None and budget.isdigit() else None)


def _doctor(state: Diagnosis) -> DoctorFacts | None:
    if state.doctor is None:
        return None
    gpu = (state.doctor.facts.get("gpu") or {})
    return DoctorFacts(tuple(state.doctor.findings), gpu.get("vendor"))


def _trace(state: Diagnosis) -> TraceFacts | None:
    if state.trace is None:
        return None
    load = state.levels.get("knee") or state.levels.get("light")
    return TraceFacts(state.trace, profiled=state.opts.profile, load=load)
