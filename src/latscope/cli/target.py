"""`latscope target up|down|status`: a real local vLLM (CPU build) serving the tiny model.

``up`` starts it in the background (own session and process group), records it in a PID file and
prints its base URL alone on stdout (so ``URL=$(latscope target up)`` works); details go to stderr.
``down`` stops it by the PID file's process group, also after the latscope that started it died.
``status`` exits 0 when it runs and answers ``/health``, 3 when it does not.
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "start, stop or inspect the embedded local vLLM target (tiny model, 127.0.0.1)"
EXIT_NOT_RUNNING = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="target_action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start the server in the background and print its URL",
                        description="Start vLLM in the background; extra vLLM flags go after --, "
                                    "e.g. latscope target up -- --max-num-seqs 2")
    up.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    up.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    up.add_argument("--model", default="tiny",
                    help="tiny (default), tiny-dummy (random weights made by vLLM: "
                         "--load-format dummy) or a local HF model directory")
    up.add_argument("--dummy", action="store_true", help="same as --model tiny-dummy")
    up.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment variable for the server (repeatable)")
    up.add_argument("--log-level", default=None, metavar="LEVEL",
                    help="vLLM logging level (sets VLLM_LOGGING_LEVEL, e.g. DEBUG)")
    up.add_argument("--log-dir", default=None, help="server log directory "
                    "(default $XDG_STATE_HOME/latscope/logs)")
    up.add_argument("--profile-dir", default=None, metavar="DIR",
                    help="enable POST /start_profile and /stop_profile; torch traces go to DIR")
    up.add_argument("--otlp-listen", default="127.0.0.1:0", metavar="HOST:PORT",
                    help="where the server sends its per-request OTLP spans (default: a free "
                         "loopback port, recorded; a later bench/diagnose --url against this "
                         "target listens there); 'off': no tracing")
    up.add_argument("--ready-timeout", type=float, default=None, metavar="S",
                    help="seconds to wait for /health (default 300)")
    up.add_argument("serve_args", nargs="*", metavar="-- VLLM_FLAGS",
                    help="extra flags passed to vLLM's server")
    down = sub.add_parser("down", help="stop the background server (whole process group)")
    down.add_argument("--grace", type=float, default=None, metavar="S",
                      help="seconds between SIGTERM and SIGKILL (default 15)")
    status = sub.add_parser("status", help="is a background server running? (exit 3 if not)")
    status.add_argument("--json", action="store_true", help="print the PID file record as JSON")


def run(args: argparse.Namespace) -> int:
    return {"up": _up, "down": _down, "status": _status}[args.target_action](args)


def _up(args: argparse.Namespace) -> int:
    from rich.console import Console

    from latscope.errors import ConfigError, TargetError
    from latscope.server.target import (
        DEFAULT_READY_TIMEOUT_S,
        LocalTarget,
        default_pid_file,
        stop_recorded,
        target_state,
    )

    err = Console(stderr=True, soft_wrap=True)
    pid_file = default_pid_file()
    found = target_state(pid_file)
    if found.state == "running" and found.record:
        raise TargetError(f"a target is already running at {found.record.url} "
                          f"(pid {found.record.pid}); run `latscope target down` first")
    if found.state == "stale" and found.record is not None:
        stop_recorded(pid_file)
        err.print(f"removed a stale PID file ({pid_file}: pid {found.record.pid} was gone)")
    env = _parse_env(args.env, ConfigError)
    if args.log_level:
        env["VLLM_LOGGING_LEVEL"] = args.log_level.upper()
    target = LocalTarget(
        port=args.port, model="tiny-dummy" if args.dummy else args.model,
        serve_args=args.serve_args, env=env, log_dir=args.log_dir,
        ready_timeout=args.ready_timeout or DEFAULT_READY_TIMEOUT_S, host=args.host,
        detach=True, pid_file=pid_file, profiler_dir=args.profile_dir,
        otlp_endpoint=_otlp_endpoint(args.otlp_listen),
    )
    err.print(f"starting vLLM ({target.model}) ... log: {target.log_dir}", highlight=False)
    target.start()
    print(target.url, flush=True)
    err.print(f"ready in {target.ready_s:.1f} s: model [bold]{target.model_name}[/], pid "
              f"{target.pid}, log {target.log_path}\nstop it with: latscope target down",
              highlight=False)
    return 0


def _otlp_endpoint(listen: str) -> str | None:
    """The OTLP/HTTP traces URL the background server exports to; port 0: a free one now (it
    is recorded, and the runs that receive later bind it)."""
    from latscope.server.otlp import parse_listen
    from latscope.server.target import free_port, traces_endpoint

    if listen == "off":
        return None
    host, port = parse_listen(listen)
    return traces_endpoint(f"{host}:{port or free_port(host)}")


def _down(args: argparse.Namespace) -> int:
    from rich.console import Console

    from latscope.server.process import DEFAULT_STOP_GRACE_S
    from latscope.server.target import default_pid_file, stop_recorded

    out = Console(soft_wrap=True)
    found = stop_recorded(default_pid_file(), grace=args.grace or DEFAULT_STOP_GRACE_S)
    rec = found.record
    if found.state == "running" and rec:
        out.print(f"stopped the target at {rec.url} (process group {rec.pgid}); "
                  f"log kept: {rec.log_path}", highlight=False)
    elif found.state == "stale" and rec:
        out.print(f"no target running; removed a stale PID file (pid {rec.pid} was gone)")
    else:
        out.print("no target running")
    return 0


def _status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from latscope.server.target import default_pid_file, target_state

    pid_file = default_pid_file()
    found = target_state(pid_file)
    rec = found.record
    if args.json:
        data = {"state": found.state, "healthy": found.healthy, "pid_file": str(pid_file),
                "record": _record_dict(rec)}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        out = Console(soft_wrap=True)
        if found.state == "running" and rec:
            health = "healthy" if found.healthy else "[red]not answering /health[/]"
            out.print(f"running at {rec.url} ({health}): model {rec.model_name}, pid {rec.pid}, "
                      f"log {rec.log_path}", highlight=False)
        elif found.state == "stale" and rec:
            out.print(f"not running; stale PID file {pid_file} (pid {rec.pid} is gone); "
                      "`latscope target down` removes it", highlight=False)
        else:
            out.print("not running")
    return 0 if found.state == "running" and found.healthy else EXIT_NOT_RUNNING


def _record_dict(rec) -> dict | None:
    from dataclasses import asdict

    return asdict(rec) if rec else None


def _parse_env(pairs: list[str], error: type[Exception]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise error(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env
