"""`latscope gateway`: a short-first, self-limiting reverse proxy in front of a server.

Prints one line once listening (``gateway http://HOST:PORT -> UPSTREAM ...``) and runs until
SIGINT/SIGTERM. Everything else is in ``latscope.gateway``.
"""

from __future__ import annotations

import argparse
import sys

HELP = "reverse proxy that queues short requests first and adapts admission (docs/gateway.md)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--upstream", required=True, metavar="URL",
                   help="the OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    p.add_argument("--listen", default="127.0.0.1:8100", metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:8100; port 0: a free one)")
    p.add_argument("--policy", default="sjf", choices=("fcfs", "sjf", "tag"),
                   help="queue order: sjf (short first, with aging; default), fcfs, or tag "
                        "(hold nothing: set each request's vLLM `priority` to its sjf deadline "
                        "for a server run with --scheduling-policy priority)")
    p.add_argument("--max-inflight", default="auto", metavar="auto|N",
                   help="requests in flight upstream: auto (AIMD, default) or a fixed number")
    p.add_argument("--ttft-target", type=float, default=None, metavar="MS",
                   help="auto: also back off when the median upstream TTFT is above this "
                        "(default: only the upstream's waiting gauge)")
    p.add_argument("--initial-inflight", type=int, default=8, metavar="N",
                   help="auto: the limit to start from (8)")
    p.add_argument("--max-queue", type=int, default=1024, metavar="N",
                   help="requests waiting in the gateway before it answers 429 (1024)")
    p.add_argument("--aging-factor", type=float, default=4.0, metavar="K",
                   help="sjf: deadline = arrival + K x cost / served rate (4)")
    p.add_argument("--aging-rate", type=float, default=None, metavar="TOKENS_PER_S",
                   help="sjf: fixed served rate for aging (default: measured)")
    p.add_argument("--tokenizer", default=None, metavar="DIR",
                   help="tokenizer.json (or its dir) for prompt costs (default: the upstream's "
                        "/tokenize, else len(text)/4)")
    p.add_argument("--upstream-priority", default="auto", choices=("auto", "on", "off"),
                   help="set vLLM's `priority` field (auto: when the upstream accepts it)")
    p.add_argument("--server-policy", default="auto", choices=("auto", "priority", "fcfs"),
                   help="tag: the upstream's --scheduling-policy (auto: from --server-log, else "
                        "its /server_info; unknown is said at start)")
    p.add_argument("--server-log", default=None, metavar="FILE",
                   help="tag: the upstream's log, to read its scheduling policy from")
    p.add_argument("--no-watch-waiting", action="store_true",
                   help="auto: do not scrape the upstream's vllm:num_requests_waiting")
    p.add_argument("--relay", default="raw", choices=("raw", "parsed"),
                   help="raw: pass the upstream's bytes on as sent (default); parsed: "
                        "de-chunk and re-chunk them (aiohttp's client and server)")
    p.add_argument("--default-max-tokens", type=int, default=256, metavar="N",
                   help="output tokens assumed when a request sets no max_tokens (256)")


def run(args: argparse.Namespace) -> int:
    from latscope.gateway import GatewayConfig, serve
    from latscope.gateway.config import parse_listen, parse_max_inflight
    from latscope.redact import redact_url_password

    host, port = parse_listen(args.listen)
    config = GatewayConfig(
        upstream=args.upstream, host=host, port=port, policy=args.policy,
        max_inflight=parse_max_inflight(args.max_inflight), ttft_target_ms=args.ttft_target,
        initial_inflight=args.initial_inflight, max_queue=args.max_queue,
        aging_factor=args.aging_factor, aging_rate=args.aging_rate, tokenizer=args.tokenizer,
        upstream_priority=args.upstream_priority, watch_waiting=not args.no_watch_waiting,
        server_policy=args.server_policy, server_log=args.server_log,
        default_max_tokens=args.default_max_tokens, relay=args.relay)

    def listening(gateway) -> None:
        limit = gateway.admission.limit.value if gateway.tagging else (
            "auto" if config.max_inflight is None else config.max_inflight)
        print(f"gateway {gateway.url} -> {redact_url_password(gateway.upstream)} "
              f"(policy {config.policy}, max-inflight {limit}, upstream priority "
              f"{'on' if gateway.set_priority else 'off'})", flush=True)
        if gateway.tagging:
            print(f"gateway: {gateway.server_policy.describe()}", flush=True)

    try:
        serve(config, listening)
    except OSError as exc:  # the port is taken, or the address is not ours
        from latscope.errors import ConfigError
        raise ConfigError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    print("gateway stopped", file=sys.stderr)
    return 0
