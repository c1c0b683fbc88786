"""Re-render a run directory from what is on disk: one renderer per kind of run."""

from __future__ import annotations

import time
from typing import Callable

from rich.console import Console

from latscope.errors import ConfigError
from latscope.rundir import RunDir
from latscope.runfiles import manifest_of, summary_of


def show(run: RunDir, console: Console, *, show_ok: bool = False) -> None:
    m = manifest_of(run.manifest, str(run.file("manifest.json")))
    started = m.started or (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m.created_wall))
                            if isinstance(m.created_wall, float) else "?")
    console.print(f"{m.kind or '?'} run, status {m.status or 'unknown'}, started {started}")
    console.print(f"directory: {run.path}")
    if m.command:
        console.print(f"command: {m.command}")
    renderer = _RENDERERS.get(run.kind, _findings_only)
    renderer(run, console, show_ok)


def _bench(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.analysis.decompfile import read_decomposition
    from latscope.report.bench import print_bench
    from latscope.report.observe import print_decomposition
    from latscope.rundir import read_meta

    _, summary = read_meta(run.path)
    if not summary:  # a run killed before it wrote its summary: rebuild it from the records
        from latscope.load.runner import rebuild_summary

        console.print("no summary.json (the run was killed): rebuilt from requests.jsonl")
        summary = rebuild_summary(run.path)
    print_bench(summary_of(summary, str(run.file("summary.json"))), console)
    if run.file("decomposition.json").is_file():
        split = read_decomposition(run.file("decomposition.json"))
        print_decomposition(split.decomposition(), console)
    _findings_only(run, console, show_ok)


def _diagnose(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.report.diagnose import render_text
    from latscope.report.write import typed_report

    report = run.read("report.json")
    if report is None:
        console.print("no report.json yet (interrupted before the end): findings so far")
        _findings_only(run, console, show_ok)
        return
    console.print(render_text(typed_report(report)), markup=False, highlight=False)


def _sweep(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.analysis.sweepfile import SweepFile, SweepMeta, read_sweep
    from latscope.report.sweep import decomposition_table, sweep_table

    path = run.file("sweep.json")
    # the analysis the sweep recorded, its SLO included: analysing again here without the SLO
    # dropped the "SLO max" mark (#19)
    doc = read_sweep(path) if path.is_file() else SweepFile()
    steps, analysis = doc.steps, doc.analysis
    if steps:
        mode = doc.meta.mode if isinstance(doc.meta, SweepMeta) else "concurrency"
        unit = "concurrency" if mode == "concurrency" else "request rate"
        console.print(sweep_table(steps, analysis, unit))
        table = decomposition_table(steps, unit)
        if table is not None:
            console.print(table)
    _findings_only(run, console, show_ok)


def _tune(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.analysis.tune import TuneState
    from latscope.report.sweep import trials_table

    state = TuneState.load(run.path)
    best = state.result.best if state.result is not None else None
    console.print(trials_table(state.trials, state.spec.objective, state.spec.latency, best))
    if best:
        console.print(f"best: {best}")


def _compare(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.analysis.compare_model import load_comparison
    from latscope.report.compare import print_comparison

    data = run.read("compare.json")
    if data is None:
        console.print("no compare.json (the comparison was interrupted or failed)")
        return
    try:
        comparison = load_comparison(data)
    except ValueError as exc:
        raise ConfigError(f"{run.path / 'compare.json'}: {exc}") from None
    print_comparison(comparison, console)


def _findings_only(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.report.findings import print_findings

    findings = run.read_findings()
    if findings:
        print_findings(findings, console, title="findings", show_ok=show_ok)
    elif run.kind not in ("bench", "tune"):
        console.print("no findings.json in this run directory")


def _fleet(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.report.fleet import render_fleet_text, typed_fleet_report

    report = run.read("report.json")
    if report is None:
        console.print("no report.json (the fleet run did not finish): findings so far")
        _findings_only(run, console, show_ok)
        return
    console.print(render_fleet_text(typed_fleet_report(report)), markup=False, highlight=False)


_RENDERERS: dict[str, Callable[[RunDir, Console, bool], None]] = {
    "bench": _bench, "diagnose": _diagnose, "sweep": _sweep, "tune": _tune,
    "watch": _diagnose,  # a watch's run directory is a passive diagnose's
    "compare": _compare, "fleet": _fleet,
}
