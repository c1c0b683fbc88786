"""`latscope report RUN_DIR`: re-render report.html and report.md from the run's report.json."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "rebuild report.html and report.md of a diagnose run from its stored report.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="a run directory holding report.json (from `latscope diagnose`)")


def run(args: argparse.Namespace) -> int:
    from latscope.report.write import read_report, write_reports

    report = read_report(args.run_dir)
    paths = write_reports(args.run_dir, report)
    for kind in ("html", "md", "json"):
        path = paths[kind]
        print(f"{kind:4} {path}  ({path.stat().st_size / 1024:.0f} KiB)")
    return 0
