"""``diagnose``: from "it is slow" to a ranked, evidenced answer, proven where latscope can.

Stages, each written to the run directory as it finishes (Ctrl-C keeps what is done):

1. doctor   host, GPU, server config and process environment (``campaign.doctor``)
2. net      the round trip on the same path (``env.net``), to split the network off TTFT
3. sweep    load doubled until throughput stops growing, ``/metrics`` scraped, within the budget
4. log      the server's log, when there is one (local target, ``--serve-cmd``, ``--log``)
5. trace    a profiler trace: ``--trace FILE``, or ``--profile`` (start/stop_profile inside a
            steady load at the knee: ``campaign.profiling``)
6. prove    for the top findings whose fix is a flag or env change, and when latscope controls
            the server: A/B runs with and without the fix (``campaign.experiment``)

Then findings from every layer are merged (one per id), a cause takes the measured share of the
symptom it explains (max_num_seqs -> the queue's share of TTFT), they are ranked on a common
target, and one verdict line names the dominant cause with its share and where it was measured.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from latscope.campaign import proofs, stages
from latscope.campaign.conclude import conclude
from latscope.campaign.document import build_report, unmodelled_report
from latscope.campaign.servers import CommandControl, HeldServer, LocalControl, Running, ServerControl
from latscope.campaign.state import (
    Budget,
    DiagnoseFailed,
    DiagnoseOptions,
    Diagnosis,
    Progress,
    StageRecord,
    run_stage,
)
from latscope.errors import ConfigError, LatscopeError
from latscope.results import Verdict
from latscope.rundir import RunDir

__all__ = ["DiagnoseFailed", "DiagnoseOptions", "Diagnosis", "diagnose"]


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
    state.run.update(prompt_seed=state.prompt_seed)
    state.collector = running.collector if running else None
    _stage(state, "doctor", lambda: stages.doctor(state, running))
    _stage(state, "net", lambda: stages.net(state, base))
    _stage(state, "sweep", lambda: stages.sweep(state, base, budget))
    if not state.steps:  # nothing measured: no verdict can be given, the run failed
        raise DiagnoseFailed(f"no load could be measured: {state.stages[-1].note}")
    _stage(state, "log", lambda: stages.log(state, running))
    if state.opts.trace or state.opts.profile:
        _stage(state, "trace", lambda: stages.trace(state, base, running, budget))
    if _conclude_recorded(state) is not None:
        return  # no ranking, no proofs: _finish writes what was gathered, then fails the run
    _stage(state, "prove", lambda: proofs.prove(state, control, running, base, budget))
    # vLLM's own priority policy first: in-engine, it is the likelier fix of the two
    _stage(state, "priority", lambda: proofs.priority(state, control, running, base, budget))
    _stage(state, "gateway", lambda: proofs.gateway(state, control, running, base, budget))
    # the final ranking, with the proofs' results, is _finish's: it runs however the run ends


@contextlib.contextmanager
def _server(state: Diagnosis) -> Iterator[tuple[ServerControl | None, Running | None]]:
    opts = state.opts
    if opts.url:
        from latscope.redact import redact_url_password

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
    with HeldServer(control, state.run.path / "server") as running:
        from latscope.redact import redact_argv

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
    assert url is not None  # diagnose() starts a server where no --url is given
    return BenchConfig(url=url, model=opts.model or (running.model if running else None),
                       api_key=opts.api_key or os.environ.get("LATSCOPE_API_KEY")
                       or os.environ.get("OPENAI_API_KEY"),
                       workload=WorkloadSpec(input_len=opts.input_len, output_len=opts.output_len,
                                             mix=parse_mix(opts.mix) if opts.mix else [],
                                             dataset=opts.dataset),
                       tokenizer=running.tokenizer_dir if running else None,
                       concurrency=1, num_requests=16, seed=state.prompt_seed)


def _stage(state: Diagnosis, name: str, work: Callable[[], str | None]) -> None:
    run_stage(state.stages, state.run, state.progress, name, work)


def _finish(state: Diagnosis, status: str) -> dict[str, Any]:
    """Rank, write the report and end the run. A bug in ranking is a failed stage with its
    cause, never silenced: the report still holds every stage and finding gathered, and the run
    fails once they are on disk (unless a failure is already on its way out)."""
    broken = _conclude_recorded(state)
    report, unmodelled = _report_recorded(state)
    broken = broken or unmodelled
    if broken is not None and status == "ok":
        status = f"failed: {broken}"
    state.run.write("report.json", report)
    state.run.write_findings(state.ranked)
    if unmodelled is None:
        _render(state.run, report)
    state.run.finish(status, verdict=(report["verdict"] or {}).get("text"))
    if broken is not None and status == f"failed: {broken}":
        raise DiagnoseFailed(f"{broken} (every stage is in {state.run.path})")
    return report


def _report_recorded(state: Diagnosis) -> tuple[dict[str, Any], str | None]:
    """report.json's dict, and None; or, when the report model refuses a section (a producer's
    key it does not know: a bug), the failed stage "report" with its cause, every section as
    its producer gave it, and the cause: the run keeps all it gathered, then fails."""
    import msgspec

    try:
        return build_report(state), None
    except msgspec.ValidationError as exc:
        cause = f"report.json does not fit the report model: {exc}"
        state.stages.append(StageRecord("report", status="failed", note=cause))
        state.progress(f"    report failed: {cause}")
        return unmodelled_report(state, cause), cause


def _conclude_recorded(state: Diagnosis) -> str | None:
    """``conclude``; what broke it, recorded as the failed stage "conclude", else None."""
    failed = next((s for s in state.stages if s.name == "conclude"), None)
    if failed is not None:  # broken once already: its record stands, not run twice
        return failed.note
    try:
        conclude(state)
        return None
    except Exception as exc:  # noqa: BLE001 -- any bug: recorded and raised after the write
        cause = f"the findings could not be ranked: {type(exc).__name__}: {exc}"
        state.stages.append(StageRecord("conclude", status="failed", note=cause))
        state.progress(f"    conclude failed: {cause}")
        state.verdict = Verdict(text=f"No verdict: {cause}", kind="none", finding_id=None,
                                healthy=False)
        return cause


def _render(run: RunDir, report: dict[str, Any]) -> None:
    """report.html and report.md beside report.json."""
    from latscope.report.write import write_reports

    write_reports(run.path, report)
