"""``latscope trace``'s terminal output: each trace, the ranks side by side, the comparison."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from latscope.report.findings import print_findings
from latscope.report.ranks import print_cross_rank
from latscope.report.trace import print_comparison, print_ranks, print_result
from latscope.trace.files import TraceRun


def print_trace_run(done: TraceRun, console: Console, *, top_n: int = 10, quiet: bool = False,
                    as_json: bool = False) -> None:
    """``latscope trace``'s terminal output from ``campaign.tracefiles.explain_traces``'s
    ``TraceRun``: each trace's breakdown (unless ``quiet``) and findings, the ranks side by side,
    then the comparison (printed with ``as_json`` too: the console is then stderr)."""
    for trace in done.traces if not as_json else []:
        if not quiet:
            print_result(trace.result, console, top_n=top_n)
        if not trace.result.devices:
            console.print("[yellow]no GPU activity in this trace (a CPU-only profile?): "
                          "nothing to break down[/yellow]")
        print_findings(trace.findings, console, title=f"Findings: {Path(trace.path).name}")
    if done.cross_rank is not None and not as_json:
        print_ranks(done.cross_rank.ranks, console)
        print_cross_rank(done.cross_rank, console)
        if done.rank_findings:
            print_findings(done.rank_findings, console, title="Findings: across ranks")
    if done.comparison is not None:
        print_comparison(done.comparison, console, top_n=top_n)
