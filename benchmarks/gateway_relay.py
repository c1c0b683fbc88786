"""The gateway's CPU per streamed request, raw relay against the parsed one (issue #24).

Two gateway processes (``--policy fcfs``, ``--relay raw`` and ``--relay parsed``) in front of one
tests/fakeserver.py (1 ms TTFT, 0.1 ms ITL: fast, so the gateway's own work dominates), each
measured by ``benchmarks/gateway.py``'s ``gateway_cpu``: its ``process_cpu_seconds_total`` around
N sequential streamed completions, net of its idle rate. Arms alternate within each repetition
(the order flipped every other one), for each output length, so the per-token part of the cost
shows apart from the per-request part. Prints mean +/- 95% t-interval per arm and the paired
difference. On a shared box the figures are CPU time, not wall time, but a contended core still
runs a process slower (caches, frequency): compare arms within one run.

    python3 benchmarks/gateway_relay.py                      # 5 reps x 200 requests, 8 and 128 tokens
    python3 benchmarks/gateway_relay.py --reps 8 --tokens 8,32,256
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from gateway import fmt, gateway_cpu, interval  # noqa: E402  (sets sys.path for src, tests)

from fakeserver import FakeServer  # noqa: E402
from latscope.gateway import running_gateway  # noqa: E402

ARMS = ("raw", "parsed")


def measure(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    cpu: dict[str, dict[str, list[float]]] = {}
    with FakeServer(ttft_ms=1, itl_ms=0.1) as srv:
        with running_gateway(srv.url, policy="fcfs", max_inflight=64, mode="process",
                             relay="raw", upstream_priority="off") as raw, \
                running_gateway(srv.url, policy="fcfs", max_inflight=64, mode="process",
                                relay="parsed", upstream_priority="off") as parsed:
            urls = {"raw": raw, "parsed": parsed}
            for url in urls.values():  # warm-up: imports, first connections
                gateway_cpu(url, 20)
            for tokens in args.tokens:
                rows = cpu.setdefault(str(tokens), {arm: [] for arm in ARMS})
                for rep in range(args.reps):
                    for arm in ARMS if rep % 2 == 0 else ARMS[::-1]:
                        got = gateway_cpu(urls[arm], args.requests, tokens)
                        rows[arm].append(got["gateway_cpu_ms_per_request"])
    return cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--requests", type=int, default=200, help="per arm and repetition (200)")
    p.add_argument("--tokens", type=lambda s: [int(t) for t in s.split(",")], default=[8, 128])
    p.add_argument("--output", type=Path, default=None, help="results JSON")
    args = p.parse_args()
    cpu = measure(args)
    print(f"\nGateway CPU per streamed request (ms; fake server, {args.reps} reps x "
          f"{args.requests} requests per arm, alternating)")
    for tokens, rows in cpu.items():
        diff = [r - q for r, q in zip(rows["raw"], rows["parsed"])]
        print(f"  {tokens:>4s} tokens: raw {fmt(*interval(rows['raw']), '', 3)}  parsed "
              f"{fmt(*interval(rows['parsed']), '', 3)}  raw-parsed "
              f"{fmt(*interval(diff), '', 3)}")
    if args.output:
        args.output.write_text(json.dumps({"args": vars(args) | {"output": str(args.output)},
                                           "cpu_ms_per_request": cpu}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
