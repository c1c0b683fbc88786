"""`latscope trace` (placeholder until its issue lands)."""

from __future__ import annotations

import argparse

HELP = "trace (not implemented yet)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    print("latscope trace: not implemented yet")
    return 2
