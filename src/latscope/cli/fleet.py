"""`latscope diagnose --prometheus URL` (a fleet's window read from Prometheus: no request sent)
and `latscope diagnose --url BALANCER --replica URL ...` (a load run through the balancer, every
replica scraped): the flags, their checks and the printing. The work is in
``latscope.campaign.fleet`` / ``campaign.fleetload``."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from latscope.cli.common import parse_seconds
from latscope.errors import ConfigError, LatscopeError

DEFAULT_SINCE = "1h"


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    fleet = parser.add_argument_group(
        "a fleet of replicas (docs/fleet.md)",
        "--prometheus: each replica's window from the Prometheus server that scrapes them, "
        "no request sent; --url BALANCER --replica URL ...: a load run through the balancer "
        "with every replica scraped")
    fleet.add_argument("--prometheus", metavar="URL", help="a Prometheus server that scrapes "
                       "the replicas' /metrics, e.g. http://prometheus:9090")
    fleet.add_argument("--since", metavar="DURATION", help="the window: the last DURATION "
                       f"(90s, 10m, 1h; default {DEFAULT_SINCE})")
    fleet.add_argument("--start", metavar="T", help="window start: unix seconds or ISO 8601 "
                       "(UTC unless it has an offset)")
    fleet.add_argument("--end", metavar="T", help="window end (default: now)")
    fleet.add_argument("--step", metavar="DURATION", help="range query step (default: the "
                       "scrape interval or window/240, whichever is larger)")
    fleet.add_argument("--selector", default="", help="PromQL label matchers of the replicas' "
                       "series, e.g. '{job=\"vllm\"}'")
    fleet.add_argument("--replica-label", default="instance", metavar="LABEL[,LABEL]",
                       help="the label(s) that tell replicas apart (default instance; e.g. pod, "
                       "or pod,model_name)")
    fleet.add_argument("--prometheus-bearer-token-file", metavar="FILE",
                       help="a bearer token for Prometheus, read from FILE (never printed or "
                       "written)")
    fleet.add_argument("--replica", action="append", default=[], metavar="URL",
                       help="with --url BALANCER: a replica behind it, whose /metrics is "
                       "scraped during the run (repeat it for each)")


def wants_fleet(args: argparse.Namespace) -> bool:
    """A fleet diagnosis: --prometheus, --replica, or --replay of a fleet run directory."""
    if getattr(args, "prometheus", None) or getattr(args, "replica", None):
        return True
    replay = getattr(args, "replay", None)
    if not replay:
        return False
    from latscope.rundir import MANIFEST, read_json

    manifest = Path(replay) / MANIFEST
    try:
        return manifest.is_file() and (read_json(manifest) or {}).get("kind") == "fleet"
    except (LatscopeError, OSError):  # an unreadable manifest is diagnose --replay's to say
        return False


def parse_duration(text: str, flag: str) -> float:
    return parse_seconds(text, flag)


def parse_time(text: str, flag: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: give unix seconds or ISO 8601, e.g. "
                          "2026-12-06T01:10:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def window_of(args: argparse.Namespace, now: float | None = None) -> tuple[float, float]:
    now = time.time() if now is None else now
    if args.since and (args.start or args.end):
        raise ConfigError("--since and --start/--end exclude each other")
    end = min(parse_time(args.end, "--end"), now) if args.end else now
    if args.start:
        start = parse_time(args.start, "--start")
    else:
        start = end - parse_duration(args.since or DEFAULT_SINCE, "--since")
    if start >= end:
        raise ConfigError(f"the window starts after it ends ({start:.0f} >= {end:.0f}; an end "
                          "in the future counts as now)")
    return start, end


def _check(args: argparse.Namespace) -> None:
    if args.prometheus and (args.url or args.replica):
        raise ConfigError("--prometheus reads a window and sends nothing; --url/--replica send "
                          "load: use one or the other")
    if args.replica and not args.url:
        raise ConfigError("--replica needs --url BALANCER: the load goes through it")
    for flag in ("serve_cmd", "trace", "profile", "mix", "dataset"):
        if getattr(args, flag, None):
            raise ConfigError(f"--{flag.replace('_', '-')} is not for a fleet diagnosis")
    if args.server_args or args.env:
        raise ConfigError("extra vLLM flags (after --) and --env are for the local target only")


def run_fleet(args: argparse.Namespace) -> int:
    import orjson

    from latscope.report.fleet import print_fleet_report, typed_fleet_report

    _check(args)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    import signal

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # as Ctrl-C: the run directory says "interrupted", exit 130

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        report = (_replay(args, progress) if args.replay else
              _prometheus(args, progress) if args.prometheus else _balancer(args, progress))
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print_fleet_report(typed_fleet_report(report))
    return 0


def _replay(args: argparse.Namespace, progress) -> dict:
    from latscope.campaign.fleetreplay import replay_fleet

    if args.prometheus or args.url or args.replica:
        raise ConfigError("--replay reads a run directory: no --prometheus, --url or --replica")
    return replay_fleet(args.replay, args.output_dir, sys.argv[1:], progress)


def _prometheus(args: argparse.Namespace, progress) -> dict:
    from latscope.campaign.fleet import PrometheusOptions, diagnose_prometheus
    from latscope.fleet.window import selector_matchers

    start, end = window_of(args)
    labels = tuple(x.strip() for x in args.replica_label.split(",") if x.strip())
    if not labels:
        raise ConfigError("--replica-label: name at least one label")
    step = parse_duration(args.step, "--step") if args.step else None
    opts = PrometheusOptions(args.prometheus, start, end, step, selector_matchers(args.selector),
                             labels, args.prometheus_bearer_token_file, args.output_dir,
                             sys.argv[1:])
    return diagnose_prometheus(opts, progress)


def _balancer(args: argparse.Namespace, progress) -> dict:
    import os

    from latscope.campaign.fleetload import BalancerOptions, diagnose_balancer

    concurrency = 8
    if args.concurrency:
        try:
            concurrency = int(args.concurrency)
        except ValueError:
            raise ConfigError(f"--concurrency {args.concurrency}: one whole number for a fleet "
                              "run") from None
        if concurrency < 1:
            raise ConfigError("--concurrency must be at least 1")
    opts = BalancerOptions(
        url=args.url, replicas=tuple(args.replica), concurrency=concurrency,
        duration_s=parse_duration(args.budget, "--budget"), input_len=args.input_len,
        output_len=args.output_len,
        api_key=args.api_key or os.environ.get("LATSCOPE_API_KEY")
        or os.environ.get("OPENAI_API_KEY"), model=args.model, output_dir=args.output_dir,
        argv=sys.argv[1:])
    return diagnose_balancer(opts, progress)
