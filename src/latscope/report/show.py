"""Re-render a run directory from what is on disk: one renderer per kind of run."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console

from latscope.errors import ConfigError
from latscope.rundir import RunDir


def show(run: RunDir, console: Console, *, show_ok: bool = False) -> None:
    m = run.manifest
    console.print(f"{m.get('kind', '?')} run, status {m.get('status') or 'unknown'}, started "
                  f"{m.get('started') or m.get('created_wall') or '?'}")
    console.print(f"directory: {run.path}")
    if m.get("command"):
        console.print(f"command: {m['command']}")
    renderer = _RENDERERS.get(run.kind, _findings_only)
    renderer(run, console, show_ok)


def _bench(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.analysis.decompose import Component, Decomposition
    from latscope.report.bench import print_bench
    from latscope.report.observe import print_decomposition
    from latscope.rundir import read_run

    manifest, records, summary = read_run(run.path)
    if not summary:  # a run killed before it wrote its summary: rebuild it from the records
        console.print("no summary.json (the run was killed): rebuilt from requests.jsonl")
        summary = _rebuild_summary(run, manifest, records)
    print_bench(summary, console)
    data = run.read("decomposition.json")
    if data:
        comps = [Component(**c) for c in data["components"]]
        fields = {k: v for k, v in data.items() if k not in ("components", "findings")}
        print_decomposition(Decomposition(comps, **fields), console)
    _findings_only(run, console, show_ok)


def _rebuild_summary(run: RunDir, manifest: dict[str, Any], records: list[Any]) -> dict[str, Any]:
    from latscope.load.runner import rebuild_summary

    return rebuild_summary(run.path)


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
    from latscope.analysis.sweep import Step, SweepAnalysis
    from latscope.report.sweep import decomposition_table, sweep_table

    doc = run.read("sweep.json") or {}
    try:
        steps = [Step.from_dict(s) for s in doc.get("steps", [])]
        # the analysis the sweep recorded, its SLO included: analysing again here without the
        # SLO dropped the "SLO max" mark (#19)
        analysis = SweepAnalysis.from_dict(doc.get("analysis"))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{run.path / 'sweep.json'}: not a sweep latscope wrote "
                          f"({type(exc).__name__}: {exc})") from exc
    if steps:
        unit = "concurrency" if (doc.get("meta") or {}).get("mode", "concurrency") == \
            "concurrency" else "request rate"
        console.print(sweep_table(steps, analysis, unit))
        table = decomposition_table(steps, unit)
        if table is not None:
            console.print(table)
    _findings_only(run, console, show_ok)


def _tune(run: RunDir, console: Console, show_ok: bool) -> None:
    from latscope.analysis.tune import TuneState
    from latscope.report.sweep import trials_table

    state = TuneState.load(run.path)
    res = state.result or {}
    console.print(trials_table(state.trials, state.spec.objective, state.spec.latency,
                               res.get("best")))
    if res.get("best"):
        console.print(f"best: {res['best']}")


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
