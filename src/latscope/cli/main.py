"""Entry point: dispatches ``latscope VERB`` to ``latscope.cli.<verb>``.

Each verb module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Verb modules keep heavy imports inside ``run`` so that ``latscope --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from latscope import __version__
from latscope.errors import LatscopeError

# verb -> module under latscope.cli (a plain dict: no registration by import side effects)
COMMANDS = {
    "diagnose": "diagnose",
    "bench": "bench",
    "target": "target",
    "logs": "logs",
    "trace": "trace",
    "doctor": "doctor",
    "net": "net",
    "sweep": "sweep",
    "tune": "tune",
    "show": "show",
    "report": "report",
    "gateway": "gateway",
    "watch": "watch",
    "compare": "compare",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="latscope",
        description="Find out why an LLM inference server is slow, layer by layer.",
    )
    parser.add_argument("--version", action="version", version=f"latscope {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, module_name in COMMANDS.items():
        module = importlib.import_module(f"latscope.cli.{module_name}")
        p = sub.add_parser(verb, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "verb", None):
        parser.print_help()
        return 2
    try:
        from latscope.cli.common import check_numeric_flags

        check_numeric_flags(parser, args)
        return int(args._run(args) or 0)
    except KeyboardInterrupt as exc:
        cause = f" ({exc})" if str(exc) else ""  # e.g. a SIGTERM while vLLM was starting
        print(f"interrupted{cause}: results gathered so far are on disk", file=sys.stderr)
        return 130
    except LatscopeError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
