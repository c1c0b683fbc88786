"""`latscope trace`: read profiler traces (Kineto JSON, rocprofv3, nsys SQLite), print where GPU
time went and why the GPU waited, write JSON; `--compare A B` diffs two traces."""

from __future__ import annotations

import argparse
from pathlib import Path

from latscope.cli.common import add_output_arguments, open_run

HELP = "explain a GPU profiler trace: breakdown, top kernels, copies, idle gaps, findings"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="trace files or rocprofv3 CSV folders (format detected from content)")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"),
                        help="diff two traces by breakdown, kernel category and kernel family")
    parser.add_argument("--window", default="auto",
                        help="auto (first to last GPU activity), steps (ProfilerStep#/execute_* "
                             "annotations) or START_MS:END_MS from the first GPU activity")
    parser.add_argument("--step-pattern", default=None,
                        help="regex for step annotations used by --window steps")
    parser.add_argument("--top", type=int, default=10, help="kernels shown (default 10)")
    parser.add_argument("--no-clamp", action="store_true",
                        help="keep AMD same-queue overlapping timestamps as recorded")
    add_output_arguments(parser, "trace")
    parser.add_argument("--quiet", action="store_true", help="print findings only")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="analyse N traces at once, each in its own process (per-rank "
                        "traces); memory is one trace per job")
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="analyse the traces as Ray tasks (ADDRESS of a cluster; omitted: "
                        "$RAY_ADDRESS or a local one); paths must be readable on every node")


def run(args: argparse.Namespace) -> int:
    from latscope.campaign.tracefiles import explain_traces
    from latscope.cli.common import finish_run
    from latscope.errors import ConfigError
    from latscope.report.text import make_console
    from latscope.report.tracerun import print_trace_run
    from latscope.trace.analyze import AnalysisOptions
    from latscope.trace.files import as_json as as_json_units

    if not args.files and not args.compare:
        raise ConfigError("give at least one trace FILE, or --compare A B")
    if args.top < 1:
        raise ConfigError(f"--top {args.top}: must be at least 1")
    if args.step_pattern:
        _check_regex(args.step_pattern, ConfigError)
    for name in [*args.files, *(args.compare or [])]:  # inputs first, then the run directory
        if not Path(name).exists():
            raise ConfigError(f"{name}: no such trace file or folder")
    run = open_run(args, "trace", traces=[*args.files, *(args.compare or [])])
    options = AnalysisOptions(window=args.window, top_n=max(args.top, 15),
                              clamp_queues=False if args.no_clamp else None)
    if args.step_pattern:
        options.step_pattern = args.step_pattern
    console = make_console(stderr=args.json)
    done = explain_traces(run, args.files, options, jobs=args.jobs, use_ray=args.ray is not None,
                          ray_address=args.ray or None, compare=args.compare)
    print_trace_run(done, console, top_n=args.top, quiet=args.quiet, as_json=args.json)
    if done.error is not None:
        raise done.error
    finish_run(run, "trace.json", as_json_units(done.file()), done.findings, as_json=args.json)
    if not args.json:
        console.print(f"[dim]run directory: {run.path} (trace.json, findings.json)[/dim]")
    return 0


def _check_regex(pattern: str, error: type[Exception]) -> None:
    import re

    try:
        re.compile(pattern)
    except re.error as exc:
        raise error(f"--step-pattern {pattern!r}: not a valid regex ({exc})") from None

