"""`latscope compare BASE NEW`: did it get slower, where in the chain, and is the difference real.

    latscope compare latscope-runs/bench-A latscope-runs/bench-B
    latscope compare A1 A2 A3 --vs B1 B2 B3                # repeated runs a side
    latscope compare A B --fail-on 'ttft_p99>+10%,throughput<-5%' --json

Exit codes for CI: 0 no regression, 1 a regression proven (beyond its tolerance), 2 inconclusive
or not comparable (and for any error: a gate must not read a broken input as "proven").
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from typing import Iterator

from latscope.cli.common import add_output_arguments

HELP = "compare two runs (or two sets of runs): the change per figure with its interval, " \
       "where in the chain it moved, a CI gate"
_GROUPS = ("workload", "load", "model", "hardware", "host", "client", "cache")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR",
                        help="BASE NEW; or BASE... --vs NEW... (run directories of one kind: "
                             "bench, sweep, diagnose, trace)")
    parser.add_argument("--vs", nargs="+", metavar="NEW", default=None,
                        help="the NEW runs (the runs before --vs are the BASE runs)")
    parser.add_argument("--fail-on", metavar="TERMS", default=None,
                        help="the gate, e.g. 'ttft_p99>+10%%,throughput<-5%%' (a regression "
                             "fails when its whole 95%% interval lies beyond the term); "
                             "'default' (the default policy) or 'none'")
    parser.add_argument("--allow", metavar="GROUPS", default="",
                        help="compare despite a difference in these groups, as a caveat: "
                             + ", ".join(_GROUPS))
    parser.add_argument("--slo", default=None,
                        help="goodput's per-request SLO, e.g. ttft<=500,tpot<=50 "
                             "(default: the runs' own --slo)")
    parser.add_argument("--load", type=float, default=None,
                        help="sweeps and diagnose runs: the load whose steps give the figures "
                             "(default: the highest both measured)")
    add_output_arguments(parser, "compare")


def run(args: argparse.Namespace) -> int:
    from latscope.errors import LatscopeError

    try:
        return _run(args)
    except LatscopeError as exc:  # exit 2, not main's 1: 1 is "a regression proven"
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from latscope.campaign.compare import CompareOptions, compare_runs, slo_terms
    from latscope.campaign.compare_write import write_comparison
    from latscope.cli.common import open_run
    from latscope.errors import ConfigError
    from latscope.findings.compare_policy import parse_fail_on
    from latscope.report.compare import print_comparison
    from latscope.report.text import make_console

    base, new = _sides(args.runs, args.vs)
    allow = frozenset(g.strip() for g in args.allow.split(",") if g.strip())
    if allow - set(_GROUPS):
        raise ConfigError(f"--allow {args.allow}: groups are {', '.join(_GROUPS)}")
    parse_fail_on(args.fail_on)
    slo_terms(args.slo)
    if args.load is not None and args.load <= 0:
        raise ConfigError(f"--load {args.load:g}: must be above 0")
    options = CompareOptions(fail_on=args.fail_on, allow=allow, slo=args.slo, load=args.load)
    run_dir = open_run(args, "compare", base=base, new=new)
    with _sigterm_as_interrupt():
        try:
            comparison = compare_runs(base, new, options)
            write_comparison(run_dir, comparison)
        except BaseException as exc:  # the manifest says how it ended, then main says it
            run_dir.finish("interrupted" if isinstance(exc, KeyboardInterrupt)
                           else f"failed: {exc}")
            raise
    console = make_console(stderr=args.json)
    print_comparison(comparison, console)
    if args.json:
        sys.stdout.buffer.write(_json(comparison.to_dict()))
        sys.stdout.flush()
    else:
        console.print(f"[dim]run directory: {run_dir.path} (compare.json, report.md, "
                      "report.html)[/dim]")
    return comparison.exit_code


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM as Ctrl-C: the run directory says "interrupted" and the exit is 130."""
    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _sides(runs: list[str], vs: list[str] | None) -> tuple[list[str], list[str]]:
    from latscope.errors import ConfigError

    if vs is None:
        if len(runs) != 2:
            raise ConfigError(f"give BASE and NEW ({len(runs)} run directories given); for "
                              "repeated runs: BASE1 BASE2 ... --vs NEW1 NEW2 ...")
        return [runs[0]], [runs[1]]
    return list(runs), list(vs)


def _json(data: object) -> bytes:
    import orjson

    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
