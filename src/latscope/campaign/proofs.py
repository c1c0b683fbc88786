"""diagnose's proofs: the fixes that are a flag or an environment change, A/B'd by restarting
the server (``campaign.experiment``), and latscope's short-first gateway, A/B'd in front of it.
Each runs only the pairs the budget has time for; what cannot be run is proposed with the
command that would measure it."""

from __future__ import annotations

from typing import Any

import numpy as np

from latscope.campaign.conclude import server_limits
from latscope.campaign.servers import Running, ServerControl
from latscope.campaign.state import Budget, Diagnosis, load_of
from latscope.findings.abtest import LoadSplit, experiment_text, proof_load
from latscope.model import Finding, Severity
from latscope.results import ABResult
from latscope.results import Proposal as ProposalEntry

MIN_PAIRS = 2


RUN_SETUP_S = 3.0


def prove(state: Diagnosis, control: ServerControl | None, running: Running | None, base: Any,
           budget: Budget) -> str:
    from latscope.campaign.experiment import run_experiment
    from latscope.campaign.proposals import propose

    candidates = [f for f in state.ranked if f.role == "cause"
                  and f.severity in (Severity.CRITICAL, Severity.WARNING)]
    load = int(state.levels.get("top") or state.levels.get("knee") or
               state.levels.get("light") or 1)
    proposals = []
    for f in candidates:
        at = _proof_load(f, state) or load
        p = propose(f, control or _seen(state), at)
        if p is not None:
            proposals.append((f, p, at))
    if not proposals:
        return "skipped: no finding's fix is a flag or environment change"
    if control is None or running is None or not state.opts.prove:
        for f, p, at in proposals:
            state.proposals.append(_proposal(f, p, at))
        why = "--no-prove" if not state.opts.prove else "latscope does not control the server"
        return f"skipped: {why}; {len(proposals)} experiment(s) proposed"
    done = []
    for f, p, at in proposals[:state.opts.max_proofs]:
        if not p.cost_measurable:
            state.proposals.append(_proposal(f, p, at))
            continue
        pairs = _pairs_that_fit(state, p, control, running, at, budget)
        if pairs < MIN_PAIRS:
            state.notes.append(f"prove: budget left no time for {f.id} ({p.change.describe()})")
            state.proposals.append(_proposal(f, p, at))
            continue
        state.progress(f"    proving {f.id}: {p.change.describe()} at c={at}")
        exp = run_experiment(p, control, running, base, at,
                             state.run.path / "prove" / f.id.replace(".", "_"),
                             pairs=pairs, progress=state.progress)
        done.append(f"{f.id}: {experiment_text(_record(state, exp.ab_result()))}")
    return "; ".join(done)


def _record(state: Diagnosis, result: ABResult) -> ABResult:
    """An A/B's result into the state and onto disk as it ends (Ctrl-C keeps it)."""
    state.experiments.append(result)
    state.run.write("experiments.json", [e.to_dict() for e in state.experiments])
    return result


def gateway(state: Diagnosis, control: ServerControl | None, running: Running | None,
             base: Any, budget: Budget) -> str:
    """Latscope's short-first gateway where queueing dominates TTFT and request sizes differ
    widely (``gateway.gateway_fits``); with the server running and time left, proven by an A/B:
    the same server direct (A) and behind the gateway (B), short requests' mean TTFT the metric
    and long requests' mean E2E the guard. The gateway needs no control of the server, only a
    workload whose sizes spread (``--mix`` or ``--dataset``)."""
    fits = _queueing_that_fits(state)
    if isinstance(fits, str):
        return fits
    fit, f, at = fits
    from latscope.campaign.experiment import run_experiment
    from latscope.campaign.proposals import Proposal
    from latscope.campaign.servers import Change

    # auto's limit starts at the server's batch size when known: from its default of 8, the
    # slow start spends the first B run's first seconds below what the server takes
    seqs = server_limits(state).max_num_seqs
    options: dict[str, Any] = {"policy": "sjf", "max_inflight": None}
    if seqs:
        options["initial_inflight"] = int(seqs)
    proposal = Proposal(f.id, Change(), metric="short_ttft_mean_ms", guard="long_e2e_mean_ms",
                        why=fit.reason, gateway=options)
    _size_runs_for_aging(proposal, state.observations.get(float(at)), at)
    url = running.url if running else state.opts.url
    current = running or _remote(url, base)
    control = control or _seen(state)
    pairs = _pairs_that_fit(state, proposal, control, current, at, budget)
    if not state.opts.prove or pairs < MIN_PAIRS:
        why = "--no-prove" if not state.opts.prove else "the budget left no time"
        state.proposals.append(_gateway_proposal(f, proposal, state.target.get("url"), why))
        return f"skipped: {why}; the gateway proposed"
    state.progress(f"    proving {f.id}: {proposal.describe()} at c={at}")
    exp = run_experiment(proposal, control, current, base, at,
                         state.run.path / "prove" / "gateway", pairs=pairs,
                         progress=state.progress)
    return f"{f.id}: {experiment_text(_record(state, exp.ab_result()))}"


def _queueing_that_fits(state: Diagnosis) -> tuple[Any, Finding, int] | str:
    """(the fit, the queueing finding, the load to prove at) when queueing on mean TTFT and
    spread sizes fit a short-first fix (the gateway's, vLLM's priority policy); else why not."""
    fit, f = _gateway_fit(state)
    if f is None:
        return "skipped: no queueing finding measured on mean TTFT"
    if not fit.propose:
        return f"skipped: {fit.reason}"
    return fit, f, _proof_load(f, state) or int(load_of(f, state) or 1)


def _pairs_that_fit(state: Diagnosis, proposal: Any, control: ServerControl,
                    current: Running, load: int, budget: Budget) -> int:
    """A/B pairs (up to ``--pairs``) that the budget left has time for: each run timed from
    the sweep's throughput at that load, plus a server start where every run needs its own.
    Unknown throughput: as many as asked, once 20 s are left."""
    from latscope.campaign.experiment import restarts_per_run, run_shape

    left = budget.left()
    obs = state.observations.get(float(load))
    rps = obs.summary.throughput.requests_per_s if obs else None
    if not rps:
        return state.opts.pairs if left >= 20 else 0
    run_s = sum(run_shape(proposal, load)) / rps + RUN_SETUP_S
    if restarts_per_run(control, proposal):
        run_s += current.start_s
        if current.set_aside:  # the diagnosed server is started again after the A/B
            left -= current.start_s
    return max(0, min(state.opts.pairs, int(left // (2 * run_s))))


def _gateway_fit(state: Diagnosis) -> tuple[Any, Finding | None]:
    from latscope.gateway.fits import gateway_fits

    for f in state.ranked:
        if f.layer != "queue" or not f.impact or f.impact.get("target") != "ttft_mean":
            continue
        load = load_of(f, state)
        obs = state.observations.get(float(load)) if load is not None else None
        if obs is None:
            continue
        sizes = _sizes_for_shape(obs)
        if len(sizes) >= 2:
            return gateway_fits(f.impact["share"], sizes), f
    return None, None


def _sizes_for_shape(obs: Any) -> list[int]:
    """The sizes a short-first fix is judged on and its A/B's run length cut to: the measured
    ones, or those the workload's own definition gives where their 95th percentile is the
    larger. A CI sweep step of 32 requests of a mix with 10% long ones sent one long request,
    so the measured p95 was a short one's and the runs were cut to the 64-request minimum where
    the long class needed ~100; another sent none, and the measured sizes' CV of 0 refused the
    fit of a mix whose definition spreads them (CV 1.7)."""
    from latscope.load.config import WorkloadSpec
    from latscope.load.promptsource import planned_sizes

    measured = _measured_sizes(obs)
    config = getattr(getattr(obs, "result", None), "config", None)
    workload = getattr(config, "workload", None)  # (a replayed step has no spec)
    planned = planned_sizes(workload) if measured and isinstance(workload, WorkloadSpec) else []
    if planned and np.percentile(planned, 95) > np.percentile(measured, 95):
        return planned
    return measured


def _measured_sizes(obs: Any) -> list[int]:
    """Each measured request's cost as the gateway counts it: prompt + output tokens."""
    return [(r.prompt_tokens or 0) + (r.output_tokens or 0) for r in obs.records
            if r.ok and not r.warmup]


def _size_runs_for_aging(proposal: Any, obs: Any, load: int) -> None:
    """Runs long enough for sjf's held-back long requests to finish inside them
    (``gateway.fits.gateway_run_shape``), from the sweep's direct run at that load; the run
    length goes into the experiment's note. Without that run, the default length."""
    from latscope.campaign.experiment import requests_per_run
    from latscope.gateway.fits import gateway_run_shape

    throughput = obs.summary.throughput if obs else None
    rps = throughput.requests_per_s if throughput else None
    tok_s = throughput.total_tokens_per_s if throughput else None
    sizes = _sizes_for_shape(obs) if obs else []
    if not (rps and tok_s and sizes):
        return
    shape = gateway_run_shape(sizes, rps, tok_s, min_requests=requests_per_run(load),
                              min_warmup=load)
    proposal.requests, proposal.warmup = shape.requests, shape.warmup
    proposal.note = shape.describe()


def _gateway_proposal(f: Finding, p: Any, url: str | None, why: str) -> ProposalEntry:
    """``url`` as the report shows it (``state.target``'s, its password redacted)."""
    return ProposalEntry(
        finding_id=f.id, change=p.describe(), why=p.why,
        note=f"not measured ({why}{'; ' + p.note if p.note else ''}): benchmarks/gateway.py "
             "runs the same A/B (direct vs gateway-fcfs vs gateway-sjf, alternating)",
        # the same flags as the change measured (or proposed), --initial-inflight included
        command=p.describe().replace("latscope gateway",
                                     f"latscope gateway --upstream {url or 'URL'}", 1))


def _remote(url: str | None, base: Any) -> Running:
    """A server latscope did not start, as the A/B's A arm (the gateway's B needs no restart)."""
    return Running(url=url or "", model=base.model, pid=None, log_path=None,
                   tokenizer_dir=base.tokenizer, start_s=0.0)


class _NoControl(ServerControl):
    """A server latscope does not control: its fixes are proposed from the command line doctor
    read of it (``/proc/PID/cmdline`` on this host), so that a flag it was started with is what
    the proposal changes (an H200 started with --num-gpu-blocks-override 512 was told to raise
    --gpu-memory-utilization, which the override makes moot)."""

    kind = "remote"

    def __init__(self, argv: list[str] | None = None) -> None:
        self._argv = list(argv or [])

    @property
    def argv(self) -> list[str]:
        return list(self._argv)


def _seen(state: Diagnosis) -> _NoControl:
    facts = state.doctor.facts if state.doctor is not None else {}
    return _NoControl(facts.get("cmdline") or [])


def _proof_load(f: Finding, state: Diagnosis) -> int | None:
    """Where an A/B shows the fix best (``findings.abtest.proof_load``)."""
    steps = [LoadSplit(s.load, s.decomposition) for s in state.steps]
    return proof_load(f, steps, load_of(f, state))


def _proposal(f: Finding, p: Any, load: int) -> ProposalEntry:
    return ProposalEntry(finding_id=f.id, change=p.change.describe(), why=p.why, note=p.note,
                         command=_proof_command(p, load))


def _proof_command(p: Any, load: int) -> str:
    flags = " ".join(p.change.flags)
    return (f"restart the server with {p.change.describe()}, then compare "
            f"`latscope bench --url URL -c {load} -n {max(16, 3 * load)}` before and after; or let "
            f"diagnose restart it for you: latscope diagnose --serve-cmd "
            f"'<your serve command> --port {{port}}{(' ' + flags) if flags else ''}'")


def priority(state: Diagnosis, control: ServerControl | None, running: Running | None,
             base: Any, budget: Budget) -> str:
    """vLLM's own priority scheduling with cost tags (``campaign.priority``), A/B'd where the
    gateway's evidence fits (queueing on mean TTFT, sizes that spread) and latscope controls the
    server; before the gateway's A/B, which gets what the budget has left."""
    fits = _queueing_that_fits(state)
    if isinstance(fits, str):
        return fits
    _, f, at = fits
    before = len(state.experiments)
    _prove_priority(state, control, running, base, budget, f, at)
    if len(state.experiments) > before:
        return f"{f.id}: {experiment_text(state.experiments[-1])}"
    return "skipped: proposed, not measured (no control of the server, or no time left)"


def _prove_priority(state: Diagnosis, control: ServerControl | None, running: Running | None,
                    base: Any, budget: Budget, finding: Finding, load: int) -> None:
    """``campaign.priority``'s A/B for the queueing finding (measured on mean TTFT, so it has an
    impact) at the proof load ``load``: runs as long as the gateway's A/B (five aging horizons
    after one of warm-up, from the sweep's run at ``load``) and the pairs the budget has room for
    after B's server start; the experiment or the proposal goes into ``state``."""
    from latscope.campaign.experiment import requests_per_run
    from latscope.campaign.priority import describe_fix, priority_proposal, prove_priority
    from latscope.gateway.fits import gateway_run_shape

    obs = state.observations.get(float(load))
    sizes = _sizes_for_shape(obs) if obs else []
    throughput = obs.summary.throughput if obs else None
    rps = throughput.requests_per_s if throughput else None
    tok_s = throughput.total_tokens_per_s if throughput else None
    shape = gateway_run_shape(_sizes_for_shape(obs), rps, tok_s,
                              min_requests=requests_per_run(load),
                              min_warmup=load) if sizes and rps and tok_s else None
    pairs = 0
    if control is not None and running is not None and state.opts.prove:
        left = Budget(budget.left() - running.start_s)  # B's server starts once (or per run)
        pairs = _pairs_that_fit(state, priority_proposal(finding.id, "", shape), control,
                                running, load, left)
    exp = prove_priority((finding.impact or {})["share"], sizes or [0, 0], finding_id=finding.id,
                         control=control if pairs >= MIN_PAIRS else None, running=running,
                         base=base, load=load, out_dir=state.run.path / "prove" / "priority",
                         pairs=pairs, run_shape=shape, progress=state.progress)
    if isinstance(exp, ABResult):
        _record(state, exp)
    elif exp.propose:
        state.proposals.append(ProposalEntry(
            finding_id=finding.id, change=describe_fix(), why=exp.reason,
            note="not measured: " + exp.reason, command=describe_fix()))
