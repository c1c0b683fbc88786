"""diagnose's measuring stages: doctor, net, the load sweep, the server log, the trace (a file,
or a profile taken at the knee). Each fills the ``Diagnosis`` and writes its file to the run
directory as it ends; each returns the one-line note its stage record shows."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from latscope.analysis.sweep import Step, StopRules, analyse, run_sweep
from latscope.analysis.sweepfile import SweepFile, write_sweep
from latscope.campaign.observe import observe, with_load
from latscope.campaign.profiling import take_profile
from latscope.campaign.servers import Running
from latscope.campaign.state import Budget, Diagnosis, pick_levels
from latscope.campaign.sweep import step_of
from latscope.model import Severity
from latscope.runfiles import LoadShape, WorkersChosen

SWEEP_SHARE = 0.6


TRACE_SHARE = 0.25

# /metrics every half second: a step of a few seconds still shows its queue in several scrapes
SCRAPE_S = 0.5


def doctor(state: Diagnosis, running: Running | None) -> str:
    from latscope.campaign.doctor import run_doctor

    url = running.url if running else state.opts.url
    log = str(running.log_path) if running and running.log_path else state.opts.log
    report = run_doctor(url=url, pid=running.pid if running else None, log=log)
    state.doctor = report
    state.run.write("doctor.json", report.to_dict())
    settings = (report.facts.get("server") or {}).get("settings") or {}
    seqs = settings.get("max_num_seqs") or {}
    if isinstance(seqs.get("value"), int):
        state.max_num_seqs = (seqs["value"], seqs.get("source", ""))
    bad = [f for f in report.findings if f.severity in (Severity.CRITICAL, Severity.WARNING)]
    return f"{len(report.findings)} checks, {len(bad)} to act on"


def net(state: Diagnosis, base: Any) -> str:
    from latscope.campaign.doctor import probe_network

    headers = {"authorization": f"Bearer {base.api_key}"} if base.api_key else {}
    report = probe_network(base.url, 20, headers=headers, stream_requests=0)
    state.net = report
    state.run.write("net.json", report.to_dict())
    state.same_host = _same_host(base.url)
    if report.error:
        return f"failed: {report.error}"
    if report.keepalive_ms:
        import numpy as np

        state.rtt_ms = float(np.median(report.keepalive_ms))
    where = "client and server share this host" if state.same_host else "remote server"
    return f"round trip p50 {state.rtt_ms:.2f} ms ({where})" if state.rtt_ms else where


def _same_host(url: str) -> bool:
    import ipaddress
    import socket
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    try:
        addrs = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    local = {"127.0.0.1", "::1"}
    with contextlib.suppress(OSError):
        local |= {str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)}
    return all(ipaddress.ip_address(a.split("%")[0]).is_loopback or a in local for a in addrs)


def sweep(state: Diagnosis, base: Any, budget: Budget) -> str:
    opts = state.opts
    can_prove = opts.prove and (opts.serve_cmd is not None or not opts.url)
    share = SWEEP_SHARE if can_prove else 1.0
    if opts.profile or opts.trace:  # the trace stage's load, trace write and analysis
        share -= TRACE_SHARE
    sweep_s = max(30.0, budget.left() * share)
    deadline = time.monotonic() + sweep_s
    step_times: list[float] = []
    out = state.run.path / "sweep"

    def measure(load: float, phase: str, workers: int | str = "auto") -> Step:
        i = len(state.steps)
        c = int(load)
        t0 = time.monotonic()
        # warm-up: two full waves, flowing into the measured requests: the first wave is the
        # start burst, and it has ended before the measured window (the server's histograms
        # over that window hold the second wave's tail at most, not the burst)
        cfg = with_load(base, concurrency=c, num_requests=max(16, 2 * c),
                        output_dir=out / f"step-{i:02d}-c{c}", warmup=2 * c, seed=100 + i)
        obs = observe(cfg, scrape_interval_s=SCRAPE_S, network_rtt_ms=state.rtt_ms,
                      collector=state.collector, server_pids=_server_pids(state),
                      workers=workers)
        step_times.append(time.monotonic() - t0)
        state.observations[load] = obs
        step = step_of(load, obs)
        metrics = step.metrics
        state.steps.append(step)
        state.progress(f"    c={c}: {metrics.get('requests_per_s') or 0:.2f} req/s, TTFT p50 "
                       f"{metrics.get('ttft_p50_ms') or 0:.0f} ms, p99 "
                       f"{metrics.get('ttft_p99_ms') or 0:.0f} ms")
        return step

    def over_budget(steps: list[Step]) -> str:
        # the next step costs about what the last did, more as latency grows past the knee
        estimate = 1.5 * step_times[-1] if step_times else 0.0
        return "" if time.monotonic() + estimate <= deadline else \
            f"cut: time budget ({sweep_s:.0f} s for the sweep)"

    def on_step(steps: list[Step]) -> None:
        state.analysis = analyse(steps, _slo(opts.slo))
        write_sweep(state.run.file("sweep.json"),
                    SweepFile(steps=list(steps), analysis=state.analysis))

    rules = StopRules(max_load=opts.max_load)
    loads = [float(c) for c in opts.loads] if opts.loads else None
    steps = run_sweep(measure, loads, start=1, factor=2.0, refine=1, integer=True, rules=rules,
                      on_step=on_step, budget=over_budget)
    state.steps = sorted(steps, key=lambda s: s.load)
    state.analysis = analyse(state.steps, _slo(opts.slo))
    pick_levels(state)
    from latscope.load.workers import free_cores

    again = remeasure_unreliable(
        state, lambda load, n: measure(load, "remeasure", workers=n),
        fits=lambda load: not over_budget(state.steps), spare_cores=free_cores() - 1)
    if again:
        state.analysis = analyse(state.steps, _slo(opts.slo))
        pick_levels(state)
        on_step(state.steps)
    reason = next((s.stop_reason for s in steps if s.stop_reason), "")
    if reason.startswith("cut"):
        state.notes.append(f"sweep {reason}; highest load measured c={state.steps[-1].load:g}")
    if loads is None and not any(s.phase == "refine" for s in steps):
        why = over_budget(state.steps) or "no unmeasured load between the knee and its neighbours"
        state.notes.append(f"sweep: no bisection step around the knee ({why})")
    knee = state.levels.get("knee")
    return (f"{len(steps)} steps, knee at c={knee:g}" if knee is not None
            else f"{len(steps)} steps, no knee found") + (f"; stopped: {reason}" if reason else "")


def remeasure_unreliable(state: Diagnosis, measure: Any, fits: Any, spare_cores: int
                         ) -> list[float]:
    """Measure again, with more client processes, a step the verdict reads (the knee, the
    highest load, light load) whose client timing was unreliable: a share read from it would be
    the client's lateness as much as the server's. ``measure(load, workers)`` runs the step and
    appends it to ``state.steps``; the first measurement's step is dropped, its run directory
    kept. Where no core is spare, or the budget has no time left (``fits(load)``), the step
    stays as it is and a note says why. Returns the loads measured again."""
    again: list[float] = []
    for name in ("knee", "top", "light"):
        load = state.levels.get(name)
        if load is None or load in again:
            continue
        obs = state.observations.get(load)
        if obs is None or obs.client.reliable:
            continue
        load_shape = obs.summary.load
        chosen = load_shape.workers_chosen if isinstance(load_shape, LoadShape) else None
        used = chosen.count if isinstance(chosen, WorkersChosen) else 1
        more = min(spare_cores, max(2, 2 * used))
        why = obs.client.why or "unreliable"
        if more <= used:
            state.notes.append(f"sweep: c={load:g}'s client timing was unreliable ({why}); no "
                               f"spare core for more than {used} client process(es)")
            continue
        if not fits(load):
            state.notes.append(f"sweep: c={load:g}'s client timing was unreliable ({why}); the "
                               f"budget left no time to measure it again with {more} client "
                               "processes")
            continue
        first = next(s for s in state.steps if s.load == load)
        state.progress(f"    c={load:g} again with {more} client processes: the client's "
                       f"timing was unreliable ({why})")
        measure(load, more)
        state.steps = sorted((s for s in state.steps if s is not first), key=lambda s: s.load)
        now = state.observations[load].client
        state.notes.append(f"sweep: c={load:g} measured again with {more} client processes "
                           f"(the first run's client timing was unreliable: {why}); "
                           + ("now reliable" if now.reliable else
                              f"still unreliable: {now.why}")
                           + f"; the first run stays in {first.run_dir}")
        again.append(load)
    return again


def _server_pids(state: Diagnosis) -> set[int]:
    """The server's process (doctor found it from the port, or latscope started it)."""
    pid = (state.doctor.facts.get("pid") if state.doctor is not None else None)
    return {pid} if isinstance(pid, int) else set()


def _slo(text: str | None) -> list[Any]:
    from latscope.analysis.knee import parse_slo

    return parse_slo(text) if text else []


def log(state: Diagnosis, running: Running | None) -> str:
    from latscope.findings.server import findings_from_log
    from latscope.server.logs import parse_log

    path = state.opts.log or (str(running.log_path) if running and running.log_path else None)
    if not path:
        return "skipped: no server log (use --log FILE for a remote server)"
    log = parse_log(path)
    state.log = log  # its rules run in the conclusion (findings.conclude)
    found = findings_from_log(log)  # log.json's own record, for a reader of the run directory
    state.run.write("log.json", {"source": path, "stats_lines": len(log.stats),
                                 "config": log.config,
                                 "findings": [f.to_dict() for f in found],
                                 "parsed": log.to_dict()})  # what --replay reads
    return f"{len(log.stats)} stats lines, {len(found)} findings"


def trace(state: Diagnosis, base: Any, running: Running | None, budget: Budget) -> str:
    from latscope.campaign.traces import analyse_traces
    from latscope.findings.trace import trace_findings_of

    if not state.opts.trace and budget.left() < 15:
        return f"cut: time budget ({budget.left():.0f} s left, a profile needs about 15 s)"
    paths = list(state.opts.trace) if state.opts.trace else take_profile(state, base, running,
                                                                          budget)
    from latscope.trace.files import as_json

    state.trace, notes = analyse_traces(paths)
    state.notes += notes
    state.run.write("trace.json", as_json(state.trace))
    where = paths[0] if len(paths) == 1 else f"{len(paths)} rank traces ({paths[0]}, ...)"
    return f"{where}: {len(trace_findings_of(state.trace))} findings"
