"""``latscope diagnose --url URL --passive``: parsing and printing only; the work is
``latscope.campaign.listen.diagnose_passive``."""

from __future__ import annotations

import argparse
import sys

from latscope.cli.common import parse_seconds

# flags of a load run that mean nothing without load: refused with --passive, not ignored
_LOAD_ONLY = (("serve_cmd", "--serve-cmd"), ("concurrency", "-c/--concurrency"),
              ("mix", "--mix"), ("dataset", "--dataset"), ("slo", "--slo"))


def parse_window(text: str, flag: str = "--window") -> float:
    """``30``, ``30s``, ``10m``, ``1h`` -> seconds (at least 2)."""
    return parse_seconds(text, flag, minimum=2)


def passive_options(args: argparse.Namespace) -> object:
    from latscope.campaign.listen import PassiveOptions
    from latscope.cli.common import api_key
    from latscope.errors import ConfigError

    if not args.url:
        raise ConfigError("--passive watches a running server: give its --url")
    for dest, flag in _LOAD_ONLY:
        if getattr(args, dest, None):
            raise ConfigError(f"{flag} sets load, and --passive sends none: drop one of them")
    if args.server_args or args.env:
        raise ConfigError("extra vLLM flags and --env are for the local target; --passive "
                          "watches the server at --url")
    if args.scrape_interval <= 0:
        raise ConfigError("--scrape-interval must be above 0")
    return PassiveOptions(
        url=args.url, window_s=parse_window(args.window), scrape_s=args.scrape_interval,
        log=args.log, otlp_listen=args.otlp_listen, otlp_grpc_listen=args.otlp_grpc_listen,
        profile=args.profile, profile_s=args.profile_seconds, trace_dir=args.trace_dir,
        trace=tuple(args.trace) if args.trace else None, output_dir=args.output_dir,
        api_key=api_key(args), argv=sys.argv[1:])


def run_passive(args: argparse.Namespace) -> int:
    import signal

    import orjson

    from latscope.campaign.listen import diagnose_passive
    from latscope.report.diagnose import print_report
    from latscope.report.write import typed_report

    opts = passive_options(args)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")  # as Ctrl-C: the window so far reaches the report

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        report = diagnose_passive(opts, progress)  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print_report(typed_report(report))
    return 0
