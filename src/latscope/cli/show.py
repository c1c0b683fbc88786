"""`latscope show RUN_DIR`: re-render a run directory's terminal view from disk (no server)."""

from __future__ import annotations

import argparse

HELP = "re-render any run directory's terminal view from disk, without touching a server"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a directory a latscope verb wrote")
    parser.add_argument("--all", action="store_true", help="also passed and skipped checks")


def run(args: argparse.Namespace) -> int:
    from latscope.report.show import show
    from latscope.report.text import make_console
    from latscope.rundir import RunDir

    run_dir = RunDir.open(args.run_dir)
    show(run_dir, make_console(), show_ok=args.all)
    return 0
