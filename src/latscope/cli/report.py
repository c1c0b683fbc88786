"""`latscope report DIR [--format F] [-o FILE]`: any run directory rendered again from disk (no
server); `latscope show DIR` is its `--format text`. The kinds and their renderers are in
``latscope.report.rerender``."""

from __future__ import annotations

import argparse
import sys

HELP = ("re-render any run directory from disk, no server: text, md, html or json; "
        "by default a report's report.html and report.md are rewritten")
# latscope.report.rerender.FORMATS (not imported here: `latscope --help` stays fast)
FORMATS = ("text", "md", "html", "json", "files")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="DIR", help="a run directory a latscope verb wrote")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="text: the terminal view (any kind); json: the run's main "
                             "document; md, html: diagnose, watch, fleet and compare runs; "
                             "files: rewrite DIR/report.md and DIR/report.html (the default "
                             "where the kind has them, text elsewhere)")
    add_view_arguments(parser)


def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    """What `show` shares with `report`."""
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write it there instead of stdout, whole or not at all "
                             "(an html page opens offline)")
    parser.add_argument("--all", action="store_true",
                        help="text: also the checks that passed or were skipped")


def run(args: argparse.Namespace) -> int:
    """Exit 0, or 2 with one line for a run that cannot be rendered (nothing written)."""
    from latscope.errors import LatscopeError

    try:
        _render(args)
    except LatscopeError as exc:  # 2, as bad input elsewhere (compare): nothing was rendered
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _render(args: argparse.Namespace) -> None:
    from latscope.cli.output import check_writable, write_atomic
    from latscope.errors import ConfigError
    from latscope.report import rerender

    run = rerender.open_run(args.run_dir)
    fmt = args.format or rerender.default_format(run.kind)
    if fmt == "files":
        if args.output:
            raise ConfigError("-o FILE goes with --format text, md, html or json; "
                              "--format files rewrites DIR/report.md and DIR/report.html")
        for kind, path in rerender.rewrite_pages(run).items():
            print(f"{kind:4} {path}  ({path.stat().st_size / 1024:.0f} KiB)")
        return
    output = check_writable(args.output, "-o") if args.output else None
    if fmt == "text":
        from latscope.report.text import make_console

        text = rerender.text_view(run, None if output else make_console(), show_ok=args.all)
    else:
        text = rerender.render(run, fmt)
    if output is not None:
        write_atomic(output, text.encode(), "-o")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
