"""``latscope trace``'s work: analyse trace files (one process per trace with ``jobs``, or Ray
tasks), the findings of each, the cross-rank view when there are several, and the diff of two
traces; what ``trace.json`` and ``findings.json`` hold is written after every trace, so the
results so far survive a later bad file. Printing is the caller's (``report.trace``).
"""

from __future__ import annotations

from latscope.findings.rank import sort_findings
from latscope.findings.trace import trace_findings
from latscope.rundir import RunDir
from latscope.trace.analyze import AnalysisOptions
from latscope.trace.files import TraceResult, TraceRun, as_json
from latscope.trace.parallel import RankAnalysis


def explain_traces(run: RunDir, files: list[str], options: AnalysisOptions, *, jobs: int = 1,
                   use_ray: bool = False, ray_address: str | None = None,
                   compare: list[str] | None = None) -> TraceRun:
    """Analyse ``files`` (then ``compare``'s two traces) into ``run``'s ``trace.json`` and
    ``findings.json``. A trace that fails stops the work: its error is returned in ``error``
    and the run finished as failed (what was analysed before it stays on disk)."""
    from latscope.trace.parallel import analyze_files

    out = TraceRun()
    analyses = analyze_files(files, options, jobs=jobs, use_ray=use_ray,
                             ray_address=ray_address) if files else []
    for analysis in analyses:
        if analysis.error is not None:
            if out.traces:  # the good traces' results are on disk
                _save(run, out, f"failed: {analysis.error}")
            else:
                run.finish(f"failed: {analysis.error}")
            out.error = analysis.error
            return out
        assert analysis.result is not None  # an analysis without an error has its result
        findings = trace_findings(analysis.result)
        out.traces.append(TraceResult(analysis.path, analysis.result, sort_findings(findings)))
        out.findings += findings
        _save(run, out)  # results so far survive a later bad file
    if len(out.traces) > 1:
        _cross_rank(run, out, analyses)
    if compare:
        _compare(out, compare, options)
    return out


def _cross_rank(run: RunDir, out: TraceRun, analyses: list[RankAnalysis]) -> None:
    from latscope.findings.crossrank import crossrank_findings
    from latscope.trace.parallel import cross_rank

    out.cross_rank = cross_rank(analyses)
    out.rank_findings = crossrank_findings(out.cross_rank)
    out.findings += out.rank_findings
    _save(run, out)


def _compare(out: TraceRun, paths: list[str], options: AnalysisOptions) -> None:
    from latscope.trace.analyze import analyze_trace
    from latscope.trace.compare import compare_results
    from latscope.trace.readers import read_trace

    a, b = (analyze_trace(read_trace(p), options) for p in paths)
    out.comparison = compare_results(a, b)


def _save(run: RunDir, out: TraceRun, status: str | None = None) -> None:
    run.write("trace.json", as_json(out.file()))
    run.write_findings(out.findings)
    if status:
        run.finish(status)
