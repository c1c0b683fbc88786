"""`latscope diagnose`: the whole chain against one server, a verdict, ranked findings, a report.

Without ``--url`` or ``--serve-cmd`` it starts the embedded local vLLM; extra vLLM flags for it
follow ``--`` and extra environment variables come with ``--env KEY=VALUE``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from latscope.cli.common import parse_seconds

if TYPE_CHECKING:
    from latscope.campaign.diagnose import DiagnoseOptions

HELP = "find out why a server is slow: doctor, net, sweep, logs, trace; a verdict and a report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("target (default: the embedded local vLLM)")
    target.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000")
    target.add_argument("--serve-cmd", help="a command that starts the server, with {port}: "
                        "diagnose controls it and can prove fixes by restarting it")
    target.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment variable for the local target (repeatable)")
    target.add_argument("--api-key", help="API key (default: $LATSCOPE_API_KEY or "
                        "$OPENAI_API_KEY); never printed or written")
    target.add_argument("--model", help="model name (default: the first of GET /v1/models)")
    target.add_argument("server_args", nargs=argparse.REMAINDER,
                        help="after --: extra vLLM flags for the local target")
    inputs = parser.add_argument_group("more evidence")
    inputs.add_argument("--log", help="the server's log file (a remote server's)")
    inputs.add_argument("--trace", action="append", metavar="FILE",
                        help="a profiler trace to analyse (any format `trace` reads); repeat "
                        "it for one trace per rank of a tensor-parallel server")
    inputs.add_argument("--profile", action="store_true",
                        help="take a profile: POST /start_profile, a short load, /stop_profile")
    inputs.add_argument("--trace-dir", help="where the server writes profiler traces "
                        "(needed with --profile and --url)")
    work = parser.add_argument_group("load")
    work.add_argument("--input-len", default="96..160", help="prompt tokens (bench's syntax; "
                      "default 96..160: spread, so that a closed loop's requests are not in "
                      "lockstep)")
    work.add_argument("--output-len", default="32..96",
                      help="output tokens (bench's syntax; default 32..96)")
    work.add_argument("--mix", help="your traffic's size mix NAME:WEIGHT:IN:OUT,... e.g. "
                      "short:0.9:128:32,long:0.1:1024:128 (a spread mix lets diagnose judge "
                      "and A/B the short-first gateway)")
    work.add_argument("--dataset", help="prompts from a ShareGPT JSON or JSONL file instead")
    work.add_argument("--max-load", type=int, default=64, help="highest concurrency to sweep")
    work.add_argument("-c", "--concurrency", help="concurrencies to measure instead of the "
                      "automatic sweep, e.g. 1,4,16")
    work.add_argument("--slo", help="percentile SLOs of a step, e.g. ttft_p99_ms<=500")
    passive = parser.add_argument_group(
        "passive: diagnose the traffic the server already has (--url), no load sent")
    passive.add_argument("--passive", action="store_true", help="watch a window of the "
                         "server's own traffic: /metrics, the log, spans; no inference request")
    passive.add_argument("--window", default="10m", help="how long to watch, e.g. 30s, 10m "
                         "(default 10m; Ctrl-C ends it early and keeps it)")
    passive.add_argument("--scrape-interval", type=float, default=2.0, metavar="S",
                         help="seconds between /metrics scrapes (default 2)")
    passive.add_argument("--otlp-listen", metavar="HOST:PORT", help="receive the server's "
                         "request spans (OTLP/HTTP) for exact per-request percentiles")
    passive.add_argument("--otlp-grpc-listen", metavar="HOST:PORT", help="the same over gRPC")
    passive.add_argument("--profile-seconds", type=float, default=5.0, metavar="S",
                         help="with --profile: seconds of live traffic to profile (default 5)")
    run = parser.add_argument_group("run")
    run.add_argument("--replay", metavar="DIR", help="re-derive the findings, verdict and "
                     "reports of a diagnose run directory with this latscope, without a server "
                     "(written to -o, default DIR/replay)")
    run.add_argument("--budget", default="4m", help="time for the measuring stages after the "
                     "server is up, e.g. 240, 90s, 4m (default 4m)")
    run.add_argument("--no-prove", action="store_true", help="propose fixes, do not A/B them")
    run.add_argument("--pairs", type=int, default=4, help="A/B pairs per fix (default 4)")
    run.add_argument("-o", "--output-dir", help="run directory (default: "
                     "./latscope-runs/diagnose-TIME)")
    run.add_argument("--json", action="store_true", help="the report as JSON on stdout, only")
    from latscope.cli.fleet import add_fleet_arguments

    add_fleet_arguments(parser)


def parse_duration(text: str) -> float:
    """--budget: at least 20 s (doctor, net and one sweep step)."""
    return parse_seconds(text, "--budget", minimum=20)


def _env(pairs: list[str]) -> dict[str, str]:
    from latscope.errors import ConfigError

    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"--env {pair!r}: use KEY=VALUE")
        out[key] = value
    return out


def build_options(args: argparse.Namespace) -> DiagnoseOptions:
    from latscope.campaign.diagnose import DiagnoseOptions
    from latscope.errors import ConfigError

    server_args = list(args.server_args or [])
    if server_args and server_args[0] == "--":
        server_args = server_args[1:]
    if args.pairs < 2:
        raise ConfigError("--pairs must be at least 2 (an interval needs two pairs)")
    if args.max_load < 1:
        raise ConfigError("--max-load must be at least 1")
    if args.url and args.serve_cmd:
        raise ConfigError("--url and --serve-cmd exclude each other")
    if (args.url or args.serve_cmd) and (server_args or args.env):
        raise ConfigError("extra vLLM flags (after --) and --env are for the local target only")
    loads = None
    if args.concurrency:
        from latscope.cli.common import parse_loads

        values = parse_loads(args.concurrency) or []
        if any(v != int(v) for v in values):
            raise ConfigError(f"--concurrency {args.concurrency}: whole numbers")
        loads = tuple(sorted(int(v) for v in values))
    if args.mix:
        from latscope.load.config import parse_mix

        parse_mix(args.mix)  # a bad mix is told before the server starts, not after
    if args.dataset and not Path(args.dataset).is_file():
        raise ConfigError(f"--dataset {args.dataset}: no such file")
    return DiagnoseOptions(
        url=args.url, serve_cmd=args.serve_cmd, serve_args=tuple(server_args),
        serve_env=_env(args.env), log=args.log, trace=tuple(args.trace) if args.trace else None,
        profile=args.profile,
        trace_dir=args.trace_dir, slo=args.slo, budget_s=parse_duration(args.budget),
        output_dir=args.output_dir, api_key=args.api_key, model=args.model,
        input_len=args.input_len, output_len=args.output_len, mix=args.mix,
        dataset=args.dataset, max_load=args.max_load, loads=loads,
        prove=not args.no_prove, pairs=args.pairs, argv=sys.argv[1:])


def run(args: argparse.Namespace) -> int:
    from latscope.cli.fleet import run_fleet, wants_fleet

    if wants_fleet(args):  # a fleet of replicas: docs/fleet.md
        return run_fleet(args)
    import orjson

    from latscope.campaign.diagnose import diagnose
    from latscope.report.diagnose import print_report
    from latscope.report.write import typed_report

    if args.replay:
        return _replay(args)
    if args.passive:
        from latscope.cli.passive import run_passive

        return run_passive(args)
    opts = build_options(args)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    import signal

    def on_term(signum: int, frame: object) -> None:
        # SIGTERM like Ctrl-C: the stages done so far and the report of them reach disk, and
        # the servers latscope started are stopped by their process groups
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        report = diagnose(opts, progress)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print_report(typed_report(report))
    return 0


def _replay(args: argparse.Namespace) -> int:
    import orjson

    from latscope.campaign.replay import replay
    from latscope.errors import ConfigError
    from latscope.report.diagnose import print_report
    from latscope.report.write import typed_report

    if args.url or args.serve_cmd or args.server_args or args.env or args.trace or args.profile:
        raise ConfigError("--replay reads a run directory: no --url, --serve-cmd, --trace, "
                          "--profile or server flags with it")
    if not Path(args.replay).is_dir():
        raise ConfigError(f"--replay {args.replay}: no such directory")
    report = replay(args.replay, args.output_dir)
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print_report(typed_report(report))
    return 0
