"""``diagnose``: from "it is slow" to a ranked, evidenced answer, proven where latscope can.

Stages, each written to the run directory as it finishes (Ctrl-C keeps what is done):

1. doctor   host, GPU, server config and process environment (``env.doctor``)
2. net      the round trip on the same path (``env.net``), to split the network off TTFT
3. sweep    load doubled until throughput stops growing, ``/metrics`` scraped, within the budget
4. log      the server's log, when there is one (local target, ``--serve-cmd``, ``--log``)
5. trace    a profiler trace: ``--trace FILE``, or ``--profile`` (start/stop_profile around a
            short load at the knee)
6. prove    for the top findings whose fix is a flag or env change, and when latscope controls
            the server: A/B runs with and without the fix (``campaign.experiment``)

Then findings from every layer are merged (one per id), a cause takes the measured share of the
symptom it explains (max_num_seqs -> the queue's share of TTFT), they are ranked on a common
target, and one verdict line names the dominant cause with its share and where it was measured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from latscope.analysis.sweep import Step, StopRules, analyse, run_sweep
from latscope.analysis.tune import outcome
from latscope.campaign.observe import Observation, observe, with_load
from latscope.campaign.servers import CommandControl, LocalControl, Running, ServerControl
from latscope.campaign.sweep import step_of
from latscope.errors import ConfigError, LatscopeError
from latscope.findings.impact import describe, severity_for_share
from latscope.findings.latency import Context, findings_from_decomposition
from latscope.findings.rank import merge, rank
from latscope.findings.server import findings_from_metrics
from latscope.model import Finding, Severity
from latscope.rundir import RunDir

Progress = Callable[[str], None]
REPORT_SCHEMA = 1
# Symptoms and, in order of preference, the causes that take their measured share.
CAUSES_OF = {
    "latency.queue": ("server.queue_max_num_seqs", "server.kv_saturation", "server.preemptions",
                      "server.queue_token_budget"),
    # DEBUG and per-request logging are written by the API server, on its own CPU
    "latency.engine_frontend": ("server.debug_logging", "server.request_logging"),
    "latency.http_frontend": ("server.debug_logging", "server.request_logging"),
}
_ACTING = (Severity.CRITICAL, Severity.WARNING)
# A symptom (its cause not named) is the verdict only from this share of its target on.
SYMPTOM_VERDICT = 0.5
# An A/B needs two pairs for an interval; each run also prepares its prompts and connections.
MIN_PAIRS = 2
RUN_SETUP_S = 3.0

# Share of the budget the sweep may use; the rest is for proving fixes and the profile.
SWEEP_SHARE = 0.6


class DiagnoseFailed(LatscopeError):
    """The run could not reach a verdict (the report holds what was gathered)."""


@dataclass
class DiagnoseOptions:
    url: str | None = None
    serve_cmd: str | None = None  # with {port}
    serve_args: tuple[str, ...] = ()  # extra vLLM flags for the local target
    serve_env: dict[str, str] = field(default_factory=dict)  # extra env for the local target
    log: str | None = None
    trace: str | None = None
    profile: bool = False
    trace_dir: str | None = None
    slo: str | None = None
    budget_s: float = 300.0
    output_dir: str | None = None
    api_key: str | None = None
    model: str | None = None
    input_len: str = "128"
    output_len: str = "64"
    mix: str | None = None  # NAME:WEIGHT:IN:OUT,... (load.config.parse_mix)
    dataset: str | None = None
    max_load: int = 64
    loads: tuple[int, ...] | None = None  # explicit concurrencies to measure (default: auto)
    prove: bool = True
    max_proofs: int = 2
    pairs: int = 4
    argv: list[str] | None = None


@dataclass
class StageRecord:
    name: str
    status: str = "ok"  # ok | failed | skipped | cut | interrupted
    seconds: float = 0.0
    note: str = ""


@dataclass
class Diagnosis:
    """Everything gathered so far; ``report()`` turns it into report.json at any point."""

    opts: DiagnoseOptions
    run: RunDir
    progress: Progress
    stages: list[StageRecord] = field(default_factory=list)
    target: dict[str, Any] = field(default_factory=dict)
    doctor: Any = None
    net: Any = None
    rtt_ms: float | None = None
    same_host: bool | None = None
    max_num_seqs: tuple[int | None, str] = (None, "")
    steps: list[Step] = field(default_factory=list)
    observations: dict[float, Observation] = field(default_factory=dict)
    analysis: Any = None
    levels: dict[str, float] = field(default_factory=dict)  # light / knee / top -> load
    log: Any = None  # the parsed server log (latscope.server.logs.ServerLog)
    log_findings: list[Finding] = field(default_factory=list)
    trace: dict[str, Any] | None = None
    trace_findings: list[Finding] = field(default_factory=list)
    experiments: list[dict[str, Any]] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranked: list[Finding] = field(default_factory=list)
    verdict: dict[str, Any] = field(default_factory=dict)
    client: dict[str, Any] = field(default_factory=dict)
    collector: Any = None  # the local server's OTLP receiver: per-request spans (docs/observe.md)
    started: float = field(default_factory=time.monotonic)


def diagnose(opts: DiagnoseOptions, progress: Progress = lambda _: None) -> dict[str, Any]:
    """Run every stage against the server and return the report (also written to disk)."""
    if opts.url and (opts.serve_cmd or opts.serve_args or opts.serve_env):
        raise ConfigError("--url and --serve-cmd/extra server flags exclude each other")
    run = RunDir.create("diagnose", opts.output_dir, argv=opts.argv)
    state = Diagnosis(opts, run, progress)
    progress(f"writing to {run.path}")
    status = "ok"
    try:
        with _server(state) as (control, running):
            _diagnose_server(state, control, running)
    except KeyboardInterrupt:
        status = "interrupted"
        state.notes.append("interrupted: the report holds the stages finished before Ctrl-C")
        raise
    except LatscopeError as exc:
        status = f"failed: {exc}"
        raise
    finally:
        report = _finish(state, status)
    return report


def _diagnose_server(state: Diagnosis, control: ServerControl | None,
                     running: Running | None) -> None:
    budget = Budget(state.opts.budget_s)
    base = _bench_base(state, running)
    state.collector = running.collector if running else None
    _stage(state, "doctor", lambda: _doctor(state, running))
    _stage(state, "net", lambda: _net(state, base))
    _stage(state, "sweep", lambda: _sweep(state, base, budget))
    if not state.steps:  # nothing measured: no verdict can be given, the run failed
        raise DiagnoseFailed(f"no load could be measured: {state.stages[-1].note}")
    _stage(state, "log", lambda: _log(state, running))
    if state.opts.trace or state.opts.profile:
        _stage(state, "trace", lambda: _trace(state, base, running))
    _rank(state)
    _stage(state, "prove", lambda: _prove(state, control, running, base, budget))
    _stage(state, "gateway", lambda: _gateway(state, control, running, base, budget))
    _rank(state)


# --- the server ---------------------------------------------------------------------------------

@contextlib.contextmanager
def _server(state: Diagnosis) -> Iterator[tuple[ServerControl | None, Running | None]]:
    opts = state.opts
    if opts.url:
        from latscope.env.redact import redact_url_password

        state.target = {"url": redact_url_password(opts.url), "local": False,
                        "controlled": False}
        state.run.update(target=state.target)
        yield None, None
        return
    if opts.serve_cmd:
        control: ServerControl = CommandControl(opts.serve_cmd)
        what = "your --serve-cmd"
    else:
        profiler = state.run.path / "profile" if opts.profile else None
        control = LocalControl(opts.serve_args, opts.serve_env, profiler_dir=profiler)
        what = "the embedded local vLLM (tiny model, CPU build)"
    state.progress(f"starting {what} ...")
    with control.start(None, state.run.path / "server") as running:
        from latscope.env.redact import redact_argv

        state.progress(f"server ready at {running.url} after {running.start_s:.0f} s")
        state.target = {"url": running.url, "local": control.kind == "local",
                        "controlled": True, "model": running.model, "same_host": True,
                        "start_s": round(running.start_s, 1),
                        "server_args": redact_argv(running.argv),  # --api-key values and the like
                        "log": str(running.log_path or "")}
        state.run.update(target=state.target)
        yield control, running


def _bench_base(state: Diagnosis, running: Running | None) -> Any:
    import os

    from latscope.load import BenchConfig, WorkloadSpec
    from latscope.load.config import parse_mix

    opts = state.opts
    url = running.url if running else opts.url
    return BenchConfig(url=url, model=opts.model or (running.model if running else None),
                       api_key=opts.api_key or os.environ.get("LATSCOPE_API_KEY")
                       or os.environ.get("OPENAI_API_KEY"),
                       workload=WorkloadSpec(input_len=opts.input_len, output_len=opts.output_len,
                                             mix=parse_mix(opts.mix) if opts.mix else [],
                                             dataset=opts.dataset),
                       tokenizer=running.tokenizer_dir if running else None,
                       concurrency=1, num_requests=16)


class Budget:
    def __init__(self, total_s: float) -> None:
        self.total_s, self.t0 = total_s, time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.total_s - self.elapsed()


def _stage(state: Diagnosis, name: str, work: Callable[[], str | None]) -> None:
    """Run one stage; a failed stage is recorded and the others still run."""
    record = StageRecord(name)
    state.stages.append(record)
    state.progress(f"[{len(state.stages)}] {name} ...")
    t0 = time.monotonic()
    try:
        record.note = work() or ""
    except KeyboardInterrupt:
        record.status, record.note = "interrupted", "Ctrl-C"
        raise
    except LatscopeError as exc:
        record.status, record.note = "failed", str(exc)
        state.progress(f"    {name} failed: {exc}")
    finally:
        record.seconds = round(time.monotonic() - t0, 1)
        if record.note.startswith(("skipped", "cut")):
            record.status = record.note.split(":")[0]
        state.run.write("stages.json", [dataclasses.asdict(s) for s in state.stages])


# --- stages --------------------------------------------------------------------------------------

def _doctor(state: Diagnosis, running: Running | None) -> str:
    from latscope.env.doctor import run_doctor

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


def _net(state: Diagnosis, base: Any) -> str:
    from latscope.env.net import probe

    headers = {"authorization": f"Bearer {base.api_key}"} if base.api_key else {}
    report = probe(base.url, 20, headers=headers, stream_requests=0)
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
        addrs = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    local = {"127.0.0.1", "::1"}
    with contextlib.suppress(OSError):
        local |= {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)}
    return all(ipaddress.ip_address(a.split("%")[0]).is_loopback or a in local for a in addrs)


def _sweep(state: Diagnosis, base: Any, budget: Budget) -> str:
    opts = state.opts
    can_prove = opts.prove and (opts.serve_cmd is not None or not opts.url)
    sweep_s = max(30.0, budget.left() * SWEEP_SHARE) if can_prove else budget.left()
    deadline = time.monotonic() + sweep_s
    step_times: list[float] = []
    out = state.run.path / "sweep"

    def measure(load: float, phase: str) -> Step:
        i = len(state.steps)
        c = int(load)
        t0 = time.monotonic()
        # warm-up: two full waves, flowing into the measured requests: the first wave is the
        # start burst, and it has ended before the measured window (the server's histograms
        # over that window hold the second wave's tail at most, not the burst)
        cfg = with_load(base, concurrency=c, num_requests=max(16, 2 * c),
                        output_dir=out / f"step-{i:02d}-c{c}", warmup=2 * c, seed=100 + i)
        obs = observe(cfg, scrape_interval_s=1.0, network_rtt_ms=state.rtt_ms,
                      collector=state.collector)
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
        state.run.write("sweep.json", {"steps": [s.to_dict() for s in steps],
                                       "analysis": state.analysis.to_dict()})

    rules = StopRules(max_load=opts.max_load)
    loads = [float(c) for c in opts.loads] if opts.loads else None
    steps = run_sweep(measure, loads, start=1, factor=2.0, refine=1, integer=True, rules=rules,
                      on_step=on_step, budget=over_budget)
    state.steps = sorted(steps, key=lambda s: s.load)
    state.analysis = analyse(state.steps, _slo(opts.slo))
    _pick_levels(state)
    reason = next((s.stop_reason for s in steps if s.stop_reason), "")
    if reason.startswith("cut"):
        state.notes.append(f"sweep {reason}; highest load measured c={state.steps[-1].load:g}")
    if loads is None and not any(s.phase == "refine" for s in steps):
        why = over_budget(state.steps) or "no unmeasured load between the knee and its neighbours"
        state.notes.append(f"sweep: no bisection step around the knee ({why})")
    knee = state.levels.get("knee")
    return (f"{len(steps)} steps, knee at c={knee:g}" if knee is not None
            else f"{len(steps)} steps, no knee found") + (f"; stopped: {reason}" if reason else "")


def _slo(text: str | None) -> list[Any]:
    from latscope.analysis.knee import parse_slo

    return parse_slo(text) if text else []


def _pick_levels(state: Diagnosis) -> None:
    """light = the lowest load, knee = Kneedle's knee, top = the highest load measured."""
    loads = [s.load for s in state.steps]
    if not loads:
        return
    state.levels["light"] = loads[0]
    knee = state.analysis.knee if state.analysis else None
    if knee is not None and knee.load in loads:
        state.levels["knee"] = knee.load
    if loads[-1] != loads[0]:
        state.levels["top"] = loads[-1]


def _level_label(state: Diagnosis, load: float) -> str:
    """``c=16 (past the knee at c=8)``, ``c=8 (the knee)``, ``c=1 (light load)``."""
    names = [n for n, v in state.levels.items() if v == load]
    knee = state.levels.get("knee")
    if "knee" in names:
        where = "the knee"
    elif "light" in names:
        where = "light load"
    elif knee is not None and load > knee:
        where = f"past the knee at c={knee:g}"
    else:
        where = "the highest load measured; no knee found"
    return f"c={load:g} ({where})"


def _log(state: Diagnosis, running: Running | None) -> str:
    from latscope.findings.server import findings_from_log
    from latscope.server.logs import parse_log

    path = state.opts.log or (str(running.log_path) if running and running.log_path else None)
    if not path:
        return "skipped: no server log (use --log FILE for a remote server)"
    log = parse_log(path)
    state.log = log
    state.log_findings = findings_from_log(log)
    state.run.write("log.json", {"source": path, "stats_lines": len(log.stats),
                                 "config": log.config,
                                 "findings": [f.to_dict() for f in state.log_findings]})
    return f"{len(log.stats)} stats lines, {len(state.log_findings)} findings"


def _trace(state: Diagnosis, base: Any, running: Running | None) -> str:
    from latscope.trace.analyze import analyze_trace, to_json_units
    from latscope.trace.findings import trace_findings
    from latscope.trace.readers import read_trace

    path = state.opts.trace or _profile(state, base, running)
    result = analyze_trace(read_trace(path))
    state.trace = to_json_units(result)
    state.trace_findings = trace_findings(result)
    state.run.write("trace.json", state.trace)
    return f"{path}: {len(state.trace_findings)} findings"


def _profile(state: Diagnosis, base: Any, running: Running | None) -> str:
    """POST /start_profile, a short load at the knee, POST /stop_profile; the newest trace."""
    import urllib.request

    trace_dir = Path(state.opts.trace_dir) if state.opts.trace_dir else (
        running.profiler_dir if running else None)
    if trace_dir is None:
        raise ConfigError("--profile against --url needs --trace-dir: where the server writes "
                          "its profiler traces (its --profiler-config torch_profiler_dir)")
    before = set(trace_dir.glob("**/*.pt.trace.json*")) if trace_dir.exists() else set()
    load = int(state.levels.get("knee") or state.levels.get("light") or 1)

    def post(path: str) -> None:
        req = urllib.request.Request(base.url.rstrip("/") + path, method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 (the user's server)
            resp.read()

    post("/start_profile")
    try:
        cfg = with_load(base, concurrency=load, num_requests=max(4, 2 * load),
                        output_dir=state.run.path / "profile-load", warmup=0, seed=900)
        observe(cfg, scrape_interval_s=0)
    finally:
        post("/stop_profile")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        new = sorted(set(trace_dir.glob("**/*.pt.trace.json*")) - before,
                     key=lambda p: p.stat().st_mtime)
        if new and _stable(new[-1]):
            return str(new[-1])
        time.sleep(1.0)
    raise ConfigError(f"no new profiler trace appeared in {trace_dir} within 120 s")


def _stable(path: Path) -> bool:
    size = path.stat().st_size
    time.sleep(0.5)
    return size > 0 and path.stat().st_size == size


# --- findings, ranking, verdict --------------------------------------------------------------

def _server_limits(state: Diagnosis) -> tuple[int | None, str, int | None]:
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
    seqs, seqs_src, mbt = _server_limits(state)
    for load in dict.fromkeys(state.levels.values()):
        obs = state.observations.get(load)
        if obs is None:
            continue
        label = _level_label(state, load)
        ctx = Context(measured_at=label, same_host=state.same_host,
                      client_reliable=obs.client["reliable"], client_why=obs.client["why"])
        if obs.decomposition is not None:
            out += findings_from_decomposition(obs.decomposition, ctx)
        out += findings_from_metrics(obs.snapshots, source=f"/metrics at {label}",
                                     max_num_seqs=seqs, max_num_seqs_source=seqs_src,
                                     max_num_batched_tokens=mbt)
    return out


def _all_findings(state: Diagnosis) -> list[Finding]:
    doctor = [f for f in (state.doctor.findings if state.doctor else [])
              if f.severity not in (Severity.OK, Severity.SKIPPED)]
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
    return doctor + net + _level_findings(state) + log + state.trace_findings


def _no_gpu_here(f: Finding) -> Finding:
    """A GPU setting on a host without a GPU (the CPU build) costs nothing that can be measured
    here: kept, with that said, as information."""
    if f.severity.rank >= Severity.INFO.rank:
        return f
    return dataclasses.replace(
        f, severity=Severity.INFO,
        why=(f.why + " " if f.why else "") + "This host has no GPU, so its cost could not be "
        "measured here; on a GPU server it applies as stated.")


def join_causes(findings: list[Finding]) -> list[Finding]:
    """A cause takes the measured share of the symptom it explains; the symptom joins it."""
    by_id = {f.id: f for f in findings}
    dropped = set()
    for symptom_id, causes in CAUSES_OF.items():
        symptom = by_id.get(symptom_id)
        # only a cause that was found (an OK "batch not full" or "not DEBUG" explains nothing),
        # and one that has not taken another symptom's share already
        cause = next((by_id[c] for c in causes if c in by_id and by_id[c].severity in _ACTING
                      and not by_id[c].impact), None)
        if symptom is None or cause is None or not symptom.impact:
            continue
        cause.impact = symptom.impact
        from_share = severity_for_share(symptom.impact["share"])
        if from_share.rank < cause.severity.rank:
            cause.severity = from_share
        cause.evidence = cause.evidence + [e for e in symptom.evidence if e not in cause.evidence]
        dropped.add(symptom_id)
    return [f for f in findings if f.id not in dropped]


def _rank(state: Diagnosis) -> None:
    merged = merge(_all_findings(state))
    for exp in state.experiments:
        _annotate(merged, exp)
    ranked, notes = rank(join_causes(merged))
    state.ranked = ranked
    state.notes = [n for n in state.notes if not n.startswith("ranking: ")] + \
                  [f"ranking: {n}" for n in notes]
    state.client = _client(state)
    state.verdict = verdict(ranked, state)


def _annotate(findings: list[Finding], exp: dict[str, Any]) -> None:
    from latscope.model import Evidence

    for f in findings:
        if f.id == exp["finding_id"]:
            text = _experiment_text(exp)
            f.evidence = f.evidence + [Evidence("A/B: " + exp["change"], text, "",
                                                f"diagnose prove stage ({len(exp['arms'])} runs)")]


def _experiment_text(exp: dict[str, Any]) -> str:
    if exp.get("change_pct") is None:
        return exp.get("note") or exp.get("verdict", "not measured")
    ci = exp.get("ci95_pct")
    interval = f" [95% CI {ci[0]:+.1f}% .. {ci[1]:+.1f}%]" if ci else ""
    text = f"{exp['metric']} {exp['change_pct']:+.1f}%{interval}: {outcome(exp)}"
    guard = exp.get("guard") or {}
    if guard.get("change_pct") is not None:
        gci = guard.get("ci95_pct")
        text += (f"; {guard['metric']} {guard['change_pct']:+.1f}%"
                 + (f" [95% CI {gci[0]:+.1f}% .. {gci[1]:+.1f}%]" if gci else ""))
    return text


def _client(state: Diagnosis) -> dict[str, Any]:
    """The client's reliability at the level the verdict rests on (the least reliable one)."""
    rows = [o.client | {"load": load} for load, o in state.observations.items()]
    if not rows:
        return {}
    worst = min(rows, key=lambda r: (r["reliable"], -(r.get("loop_lag_p99_ms") or 0)))
    return {**worst, "same_host": state.same_host}


def verdict(ranked: list[Finding], state: Diagnosis) -> dict[str, Any]:
    # the ranking puts measured findings first: a measured share is the answer before a setting
    # whose cost was not measured, and a symptom no finding explains is the answer when it is
    # half of its target or more (a smaller one is where time goes, not a fault: the healthy
    # local target's API server takes a fixed ~48 ms, 27% of TTFT at its knee)
    top = next((f for f in ranked if f.severity in _ACTING and f.layer != "client"
                and (f.role == "cause" or (f.impact or {}).get("share", 0.0) >= SYMPTOM_VERDICT)),
               None)
    if top is not None:
        impact = top.impact or {}
        share = describe(impact)
        text = (f"At {impact['measured_at']}, {impact['share']:.0%} "
                f"{_target_words(impact)} is {_layer_words(top)}: {top.title}"
                if impact.get("measured_at") and impact.get("share") is not None
                else f"{top.title} (its cost was not measured here)")
        proof = next((e for e in state.experiments if e["finding_id"] == top.id), None)
        if proof is not None:
            text += f". Fix measured: {proof['change']}: {_experiment_text(proof)}"
        untried = _untried_fix(top, state, proof)
        if untried:
            text += f". Not measured here, to try next: {untried}"
        return {"text": text, "finding_id": top.id, "healthy": False,
                "severity": top.severity.value, "share": impact.get("share"),
                "target": impact.get("target"), "measured_at": impact.get("measured_at"),
                "impact": share}
    return _healthy_verdict(state)


def _untried_fix(top: Finding, state: Diagnosis, proof: dict[str, Any] | None) -> str | None:
    """The finding's proposed fix that no A/B measured, when the one measured did not help (on
    an H200 with a full batch the verdict told only of the gateway that made it worse, not of
    the --max-num-seqs it could not prove through --url)."""
    if proof is not None and proof.get("helped"):
        return None
    measured = {e["change"] for e in state.experiments}
    return next((p["change"] for p in state.proposals
                 if p["finding_id"] == top.id and p["change"] not in measured), None)


def _target_words(impact: dict[str, Any]) -> str:
    return {"ttft_mean": "of mean TTFT", "ttft_p99": "of p99 TTFT", "e2e_mean": "of mean E2E",
            "tpot": "of TPOT", "throughput": "of throughput",
            "gpu_window": "of the GPU window"}.get(impact.get("target", ""), "")


def _layer_words(f: Finding) -> str:
    if f.id == "latency.engine_frontend":
        return "the API server's own processing"
    return {"queue": "queueing", "network": "the network", "frontend": "the HTTP frontend",
            "prefill": "prefill", "decode": "decode", "gpu": "GPU time", "config": "configuration",
            "host": "the host"}.get(f.layer, f.layer or "this")


def _healthy_verdict(state: Diagnosis) -> dict[str, Any]:
    load = state.levels.get("knee") or state.levels.get("top") or state.levels.get("light")
    obs = state.observations.get(load) if load is not None else None
    if obs is None or obs.decomposition is None:
        return {"text": "No verdict: no load was measured (see the stages for why)",
                "healthy": False, "finding_id": None}
    d = obs.decomposition
    parts = sorted((c for c in d.components if c.key in _TTFT_LEAVES and c.mean_ms
                    and c.mean_ms > 0), key=lambda c: -(c.mean_ms or 0))
    ttft = d.component("ttft")
    split = ", ".join(f"{c.label} {c.mean_ms / ttft.mean_ms:.0%}" for c in parts[:3]
                      if ttft and ttft.mean_ms)
    where = _level_label(state, load)
    thr = obs.summary.get("throughput", {}).get("requests_per_s") or 0
    text = (f"No configuration fault found. At {where}: {thr:.2f} req/s, mean TTFT "
            f"{ttft.mean_ms:.0f} ms ({split})")
    return {"text": text, "healthy": True, "finding_id": None, "measured_at": where}


_TTFT_LEAVES = ("ttft.client", "ttft.network", "ttft.frontend", "ttft.server.queue",
                "ttft.server.prefill", "ttft.server.other")


# --- proving fixes ---------------------------------------------------------------------------

def _prove(state: Diagnosis, control: ServerControl | None, running: Running | None, base: Any,
           budget: Budget) -> str:
    from latscope.campaign.experiment import propose, run_experiment

    candidates = [f for f in state.ranked if f.role == "cause"
                  and f.severity in (Severity.CRITICAL, Severity.WARNING)]
    load = int(state.levels.get("top") or state.levels.get("knee") or
               state.levels.get("light") or 1)
    proposals = []
    for f in candidates:
        at = _proof_load(f, state) or load
        p = propose(f, control or _NoControl(), at)
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
        state.experiments.append(exp.to_dict())
        state.run.write("experiments.json", state.experiments)
        done.append(f"{f.id}: {_experiment_text(state.experiments[-1])}")
    return "; ".join(done)


def _gateway(state: Diagnosis, control: ServerControl | None, running: Running | None,
             base: Any, budget: Budget) -> str:
    """Latscope's short-first gateway where queueing dominates TTFT and request sizes differ
    widely (``gateway.gateway_fits``); with the server running and time left, proven by an A/B:
    the same server direct (A) and behind the gateway (B), short requests' mean TTFT the metric
    and long requests' mean E2E the guard. The gateway needs no control of the server, only a
    workload whose sizes spread (``--mix`` or ``--dataset``)."""
    fit, f = _gateway_fit(state)
    if f is None:
        return "skipped: no queueing finding measured on mean TTFT"
    if not fit.propose:
        return f"skipped: {fit.reason}"
    from latscope.campaign.experiment import Proposal, run_experiment
    from latscope.campaign.servers import Change

    at = _proof_load(f, state) or int(_load_of(f, state) or 1)
    # --- issue #24: vLLM's priority policy + cost tags first (campaign.priority); the lead
    # re-homes this call into the prove stage when merging
    from latscope.campaign.priority import prove_in_diagnosis
    prove_in_diagnosis(state, control, running, base, budget, f, at)
    # --- end of issue #24's call
    # auto's limit starts at the server's batch size when known: from its default of 8, the
    # slow start spends the first B run's first seconds below what the server takes
    seqs = _server_limits(state)[0]
    options: dict[str, Any] = {"policy": "sjf", "max_inflight": None}
    if seqs:
        options["initial_inflight"] = int(seqs)
    proposal = Proposal(f.id, Change(), metric="short_ttft_mean_ms", guard="long_e2e_mean_ms",
                        why=fit.reason, gateway=options)
    _size_runs_for_aging(proposal, state.observations.get(float(at)), at)
    url = running.url if running else state.opts.url
    current = running or _remote(url, base)
    control = control or _NoControl()
    pairs = _pairs_that_fit(state, proposal, control, current, at, budget)
    if not state.opts.prove or pairs < MIN_PAIRS:
        why = "--no-prove" if not state.opts.prove else "the budget left no time"
        state.proposals.append(_gateway_proposal(f, proposal, state.target.get("url"), why))
        return f"skipped: {why}; the gateway proposed"
    state.progress(f"    proving {f.id}: {proposal.describe()} at c={at}")
    exp = run_experiment(proposal, control, current, base, at,
                         state.run.path / "prove" / "gateway", pairs=pairs,
                         progress=state.progress)
    state.experiments.append(exp.to_dict())
    state.run.write("experiments.json", state.experiments)
    return f"{f.id}: {_experiment_text(state.experiments[-1])}"


def _pairs_that_fit(state: Diagnosis, proposal: Any, control: ServerControl,
                    current: Running, load: int, budget: Budget) -> int:
    """A/B pairs (up to ``--pairs``) that the budget left has time for: each run timed from
    the sweep's throughput at that load, plus a server start where every run needs its own.
    Unknown throughput: as many as asked, once 20 s are left."""
    from latscope.campaign.experiment import restarts_per_run, run_shape

    left = budget.left()
    obs = state.observations.get(float(load))
    rps = ((obs.summary.get("throughput") or {}).get("requests_per_s") if obs else None)
    if not rps:
        return state.opts.pairs if left >= 20 else 0
    run_s = sum(run_shape(proposal, load)) / rps + RUN_SETUP_S
    if restarts_per_run(control, proposal):
        run_s += current.start_s
    return min(state.opts.pairs, int(left // (2 * run_s)))


def _gateway_fit(state: Diagnosis) -> tuple[Any, Finding | None]:
    from latscope.gateway.fits import gateway_fits

    for f in state.ranked:
        if f.layer != "queue" or not f.impact or f.impact.get("target") != "ttft_mean":
            continue
        load = _load_of(f, state)
        obs = state.observations.get(float(load)) if load is not None else None
        if obs is None:
            continue
        sizes = _measured_sizes(obs)
        if len(sizes) >= 2:
            return gateway_fits(f.impact["share"], sizes), f
    return None, None


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

    throughput = (obs.summary.get("throughput") or {}) if obs else {}
    rps, tok_s = throughput.get("requests_per_s"), throughput.get("total_tokens_per_s")
    sizes = _measured_sizes(obs) if obs else []
    if not (rps and tok_s and sizes):
        return
    shape = gateway_run_shape(sizes, rps, tok_s, min_requests=requests_per_run(load),
                              min_warmup=load)
    proposal.requests, proposal.warmup = shape.requests, shape.warmup
    proposal.note = shape.describe()


def _gateway_proposal(f: Finding, p: Any, url: str | None, why: str) -> dict[str, Any]:
    """``url`` as the report shows it (``state.target``'s, its password redacted)."""
    return {"finding_id": f.id, "change": p.describe(), "why": p.why,
            "note": f"not measured ({why}{'; ' + p.note if p.note else ''}): "
                    "benchmarks/gateway.py runs the same A/B (direct vs gateway-fcfs vs "
                    "gateway-sjf, alternating)",
            # the same flags as the change measured (or proposed), --initial-inflight included
            "command": p.describe().replace("latscope gateway",
                                            f"latscope gateway --upstream {url or 'URL'}", 1)}


def _remote(url: str | None, base: Any) -> Running:
    """A server latscope did not start, as the A/B's A arm (the gateway's B needs no restart)."""
    return Running(url=url or "", model=base.model, pid=None, log_path=None,
                   tokenizer_dir=base.tokenizer, start_s=0.0)


class _NoControl(ServerControl):
    kind = "remote"


def _proof_load(f: Finding, state: Diagnosis) -> int | None:
    """Where an A/B shows the fix best: for a queueing cause, the lowest measured load at which
    queueing is half of TTFT or more (past it, both arms saturate the engine and the difference
    drowns in the longer runs' noise); otherwise where the finding was measured."""
    if f.layer == "queue":
        for step in state.steps:
            d = step.decomposition
            if d.get("ttft") and d.get("ttft.server.queue", 0.0) / d["ttft"] >= 0.5:
                return int(step.load)
    return _load_of(f, state)


def _load_of(f: Finding, state: Diagnosis) -> int | None:
    import re

    match = re.match(r"c=(\d+)", (f.impact or {}).get("measured_at", ""))
    return int(match.group(1)) if match else None


def _proposal(f: Finding, p: Any, load: int) -> dict[str, Any]:
    return {"finding_id": f.id, "change": p.change.describe(), "why": p.why, "note": p.note,
            "command": _proof_command(p, load)}


def _proof_command(p: Any, load: int) -> str:
    flags = " ".join(p.change.flags)
    return (f"restart the server with {p.change.describe()}, then compare "
            f"`latscope bench --url URL -c {load} -n {max(16, 3 * load)}` before and after; or let "
            f"diagnose restart it for you: latscope diagnose --serve-cmd "
            f"'<your serve command> --port {{port}}{(' ' + flags) if flags else ''}'")


# --- the report ---------------------------------------------------------------------------------

def _finish(state: Diagnosis, status: str) -> dict[str, Any]:
    with contextlib.suppress(Exception):  # ranking must not lose what is on disk
        _rank(state)
    report = build_report(state)
    state.run.write("report.json", report)
    state.run.write_findings(state.ranked)
    _render(state.run, report)
    state.run.finish(status, verdict=report["verdict"].get("text"))
    return report


def _render(run: RunDir, report: dict[str, Any]) -> None:
    """report.html and report.md beside report.json."""
    from latscope.report.write import write_reports

    write_reports(run.path, report)


def build_report(state: Diagnosis) -> dict[str, Any]:
    from latscope import __version__

    return {
        "schema_version": REPORT_SCHEMA, "kind": "diagnose", "latscope_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": state.run.manifest.get("command", ""),
        "target": {**state.target, "same_host": state.same_host},
        "verdict": state.verdict,
        "findings": [f.to_dict() for f in state.ranked],
        "stages": [dataclasses.asdict(s) for s in state.stages],
        "client": state.client,
        "sweep": _sweep_section(state),
        "decompositions": _decomposition_section(state),
        "timeseries": _timeseries_section(state),
        "trace": _trace_section(state.trace),
        "experiments": state.experiments,
        "proposals": state.proposals,
        "notes": state.notes,
        "elapsed_s": round(time.monotonic() - state.started, 1),
        "run_dir": str(state.run.path),
    }


def _sweep_section(state: Diagnosis) -> dict[str, Any] | None:
    if not state.steps:
        return None
    points = []
    for s in state.steps:
        m = s.metrics
        points.append({"load": s.load, "throughput_rps": m.get("requests_per_s"),
                       "output_tok_s": m.get("output_tokens_per_s"),
                       "ttft_p50_ms": m.get("ttft_p50_ms"), "ttft_p99_ms": m.get("ttft_p99_ms"),
                       "e2e_p50_ms": m.get("e2e_p50_ms"), "e2e_p99_ms": m.get("e2e_p99_ms"),
                       "itl_p50_ms": m.get("itl_p50_ms"), "errors": m.get("requests_failed"),
                       "prefix_cache_hit_rate": m.get("prefix_cache_hit_rate"), "warm": True,
                       "run_dir": s.run_dir})
    a = state.analysis
    knee = a.knee.to_dict() if a and a.knee else None
    cut = next((s.stop_reason for s in state.steps if s.stop_reason), "")
    return {"load_kind": "concurrency", "points": points,
            "knee": {"load": knee["load"], "confidence": knee.get("confidence")} if knee else None,
            "recommended": ({"load": a.recommended, "why": "10% left of the knee"}
                            if a and a.recommended is not None else None),
            "cut": cut}


def _decomposition_section(state: Diagnosis) -> list[dict[str, Any]]:
    out = []
    for load in dict.fromkeys(state.levels.values()):
        obs = state.observations.get(load)
        if obs is None or obs.decomposition is None:
            continue
        comps = [{"key": c.key, "label": c.label, "parent": c.parent, "mean_ms": c.mean_ms,
                  "share": c.share, "source": c.source, "note": c.note}
                 for c in obs.decomposition.components]
        out.append({"label": _level_label(state, load), "load": load, "components": comps,
                    "server_source": obs.decomposition.server_source,
                    "notes": obs.decomposition.notes,
                    "client_reliable": obs.client["reliable"]})
    return out


def _timeseries_section(state: Diagnosis) -> dict[str, Any] | None:
    from latscope.server.metrics import counter_delta, gauge_series

    snaps = [(load, s) for load, o in sorted(state.observations.items()) for s in o.snapshots]
    if not snaps:
        return None
    t0 = snaps[0][1].wall_time
    series: dict[str, list[Any]] = {k: [] for k in ("t_s", "running", "waiting", "kv_usage",
                                                    "preemptions", "client_in_flight",
                                                    "load_level")}
    first = snaps[0][1]
    for load, snap in snaps:
        one = [snap]
        series["t_s"].append(round(snap.wall_time - t0, 3))
        series["running"].append(_last(gauge_series(one, "vllm:num_requests_running", combine=sum)))
        series["waiting"].append(_last(gauge_series(one, "vllm:num_requests_waiting", combine=sum)))
        series["kv_usage"].append(_last(gauge_series(one, "vllm:kv_cache_usage_perc", combine=max)))
        pre = counter_delta(first, snap, "vllm:num_preemptions_total")
        series["preemptions"].append(pre.delta if pre else None)
        series["client_in_flight"].append(load)
        series["load_level"].append(load)
    return series


def _last(points: list[tuple[Any, float]]) -> float | None:
    return points[-1][1] if points else None


def _trace_section(trace: dict[str, Any] | None) -> dict[str, Any] | None:
    """The first device's breakdown, kernel categories and top kernels (``trace.analyze``'s
    result after ``to_json_units``: every ``*_ns`` is ``*_ms``)."""
    if not trace or not trace.get("devices"):
        return None
    dev = trace["devices"][0]
    b = dev.get("breakdown") or {}
    kernels = dev.get("kernels") or {}
    shares = {k: b.get(f"{k}_share") for k in ("compute", "exposed_comm", "exposed_copy", "idle")}
    cats = [{"name": c.get("category"), "ms": c.get("union_ms"), "share": c.get("share_of_busy")}
            for c in kernels.get("categories", [])]
    top = [{"name": k.get("name"), "ms": k.get("total_ms"), "count": k.get("count"),
            "share": k.get("share_of_busy"), "category": k.get("category")}
           for k in kernels.get("top", [])[:15]]
    return {"source": (trace.get("source") or {}).get("path"), "device": dev.get("device"),
            "window_ms": b.get("window_ms"), "breakdown": shares, "categories": cats,
            "top_kernels": top}
