"""`latscope watch URL`: the server's live numbers every scrape until Ctrl-C; no load sent."""

from __future__ import annotations

import argparse
import sys

from latscope.cli.common import add_api_key_argument

HELP = "watch a server's live traffic (rate, queue, KV, TTFT/ITL/E2E, top finding); no load sent"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--interval", type=float, default=2.0, metavar="S",
                        help="seconds between /metrics scrapes (default 2)")
    parser.add_argument("--duration", help="stop after this long, e.g. 30s, 10m (default: "
                        "until Ctrl-C)")
    parser.add_argument("--log", help="the server's log file, followed as it grows")
    add_api_key_argument(parser)
    parser.add_argument("-o", "--output-dir", metavar="DIR",
                        help="run directory (default ./latscope-runs/watch-TIME); "
                        "`diagnose --replay DIR` reads it")
    parser.add_argument("--json", action="store_true",
                        help="no live view: the final report as JSON on stdout, only")


def run(args: argparse.Namespace) -> int:
    import signal

    import orjson

    from latscope.campaign.watch import WatchOptions, watch
    from latscope.cli.common import api_key
    from latscope.cli.passive import parse_window
    from latscope.errors import ConfigError
    from latscope.report.watch import view_for

    if args.interval <= 0:
        raise ConfigError("--interval must be above 0")
    opts = WatchOptions(url=args.url, interval_s=args.interval,
                        duration_s=parse_window(args.duration, "--duration") if args.duration else None,
                        log=args.log, output_dir=args.output_dir, api_key=api_key(args),
                        argv=sys.argv[1:])
    view = view_for(sys.stderr if args.json else sys.stdout, args.url)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        report = watch(opts, view)
    finally:
        signal.signal(signal.SIGTERM, previous)
        view.close()
    scrapes = (report.get("window") or {}).get("scrapes") or 0
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0 if scrapes >= 2 else 1
    if scrapes < 2:  # nothing watched: the run failed, its directory says what was tried
        print(f"error: {scrapes} /metrics scrape(s) read from {args.url}, a window needs two "
              f"(the run is in {report['run_dir']})", file=sys.stderr)
        return 1
    import textwrap

    verdict = (report.get("verdict") or {}).get("text") or "no verdict"
    print("", *textwrap.wrap(f"{report['run_dir']}: {verdict}", 80, subsequent_indent="  ",
                             break_on_hyphens=False),
          f"re-read it: latscope diagnose --replay {report['run_dir']}", sep="\n")
    return 0
