"""`latscope show DIR`: `latscope report DIR --format text`, by its older name (same code)."""

from __future__ import annotations

import argparse

from latscope.cli import report

HELP = "re-print any run directory's terminal view from disk (= report DIR --format text)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="DIR", help="a run directory a latscope verb wrote")
    report.add_view_arguments(parser)


def run(args: argparse.Namespace) -> int:
    args.format = "text"
    return report.run(args)
