"""Does ``-c N`` hold N requests in flight over what latscope reports (issue #52, item 5)?

Against the fake server (``tests/fakeserver.py``, its own process) with a fixed TTFT and ITL
(50 ms and 10 ms, 128 tokens by default: ~1.3 s a request), a closed loop at each concurrency
(64 and 256), ``--per-slot`` requests a slot, no warm-up (``latscope bench``'s default), run
by a bare raw-socket client (every slot sends at once, keep-alive connections opened before;
``benchmarks/client_ceiling.py``'s floor, keeping each request's times) and by latscope (this
build, and any ``--src DIR`` builds, each in its own process), alternating, ``--reps`` times.
Printed per client (medians over the repetitions):

- in flight: requests in flight on average over the window its statistics cover (the raw
  client: its first send to its last send; latscope: the first to the last send of its
  measured requests), counted from the records (every request in flight in it, warm-up
  included);
- tok/s: the output tokens/s it reports (latscope: ``summary.json`` throughput, its steady
  window; the raw client: the same definition over its own times: tokens of the requests that
  ended in its window, over the window);
- TTFT p50 / p99 as reported, and its error against the server's truth (its first write -
  the kernel's receive time of the request) at p50 / p99, in ms.

    python3 benchmarks/held_concurrency.py [--reps 3] [--concurrency 64,256] [--src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeserver import FakeServer  # noqa: E402

_LATSCOPE = """
import json, sys
from pathlib import Path
from latscope.load import BenchConfig, run_bench
url, c, n, tokens, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
config = BenchConfig(url=url, model="fake-model", num_requests=n, concurrency=c,
                     output_dir=Path(out))
config.workload.input_len, config.workload.output_len = "16", tokens
result = run_bench(config)
s = result.summary
measured = [r for r in result.records if not r.warmup and r.ok]
times = [(r.sent_ns, r.end_ns, r.first_token_ns, r.request_id, r.warmup)
         for r in result.records if r.end_ns]
print(json.dumps({"tok_s": s["throughput"]["output_tokens_per_s"],
                  "reported_in_flight": (s.get("load") or {}).get("mean_in_flight"),
                  "ramp": (s.get("load") or {}).get("ramp_requests_excluded"),
                  "ttft_ms": [s["ttft_ms"]["p50"], s["ttft_ms"]["p99"]], "times": times}))
"""


def run_latscope(src: str, url: str, c: int, n: int, tokens: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": src}
        proc = subprocess.run([sys.executable, "-c", _LATSCOPE, url, str(c), str(n), str(tokens),
                               str(Path(tmp) / "run")], capture_output=True, text=True, env=env,
                              timeout=900)
    if proc.returncode:
        raise SystemExit(f"latscope ({src}) failed: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    measured = [t for t in out["times"] if not t[4]]
    window = (min(t[0] for t in measured), max(t[0] for t in measured))
    out["in_flight"] = _in_flight(out["times"], *window)
    out["ttft_by_id"] = {t[3]: (t[2] - t[0]) / 1e6 for t in measured if t[2]}
    return out


class _Raw(asyncio.Protocol):
    def __init__(self) -> None:
        self.reads: list[tuple[int, bytes]] = []
        self.done: asyncio.Future[None] | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reads.append((time.perf_counter_ns(), data))
        if data.endswith(b"0\r\n\r\n") and self.done is not None:
            self.done.set_result(None)


async def _raw(url: str, c: int, n: int, tokens: int) -> dict[str, Any]:
    host, port = url.split("//")[1].split(":")
    loop = asyncio.get_running_loop()
    conns = [(await loop.create_connection(_Raw, host, int(port)))[1] for _ in range(c)]
    body = json.dumps({"model": "fake-model", "prompt": "hello " * 16, "max_tokens": tokens,
                       "stream": True, "ignore_eos": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: "
            f"application/json\r\ncontent-length: {len(body)}\r\nx-request-id: ").encode()
    left = iter(range(n))
    times: list[tuple[int, int, int, str, bool]] = []

    async def slot(conn: _Raw) -> None:
        for i in left:
            rid = f"raw-{i}"
            conn.reads, conn.done = [], loop.create_future()
            sent = time.perf_counter_ns()
            conn.transport.write(head + rid.encode() + b"\r\n\r\n" + body)
            await conn.done
            first = next(ns for ns, d in conn.reads if b'"text":"' in d)
            times.append((sent, conn.reads[-1][0], first, rid, False))

    await asyncio.gather(*(slot(conn) for conn in conns))
    for conn in conns:
        conn.transport.close()
    lo, hi = min(t[0] for t in times), max(t[0] for t in times)
    ended = sum(1 for t in times if lo <= t[1] <= hi)
    ttfts = [(t[2] - t[0]) / 1e6 for t in times]
    return {"tok_s": ended * tokens / ((hi - lo) / 1e9), "in_flight": _in_flight(times, lo, hi),
            "ttft_ms": [float(np.percentile(ttfts, 50)), float(np.percentile(ttfts, 99))],
            "ttft_by_id": {t[3]: (t[2] - t[0]) / 1e6 for t in times}, "reported_in_flight": None,
            "ramp": None}


def _in_flight(times: list[Any], lo: int, hi: int) -> float:
    busy = sum(max(0, min(end, hi) - max(sent, lo)) for sent, end, *_ in times)
    return busy / (hi - lo)


def _errors(srv: FakeServer, ttft_by_id: dict[str, float]) -> tuple[float, float]:
    truth = srv.truth()
    err = [ms - (truth[rid].chunk_ns[0] - truth[rid].recv_ns) / 1e6
           for rid, ms in ttft_by_id.items() if rid in truth and truth[rid].chunk_ns]
    return float(np.percentile(err, 50)), float(np.percentile(err, 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", default="64,256")
    parser.add_argument("--per-slot", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--src", action="append", default=[])
    args = parser.parse_args()
    clients: dict[str, str | None] = {"raw": None, "latscope": str(REPO / "src")}
    for i, src in enumerate(args.src):
        clients[f"src{i + 1}"] = str(Path(src).resolve())
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; server TTFT "
          f"{args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, {args.tokens} tokens; "
          f"{args.per_slot} requests a slot, no warm-up")
    print(f"{'c':>5} {'client':<9} {'in flight':>9} {'tok/s':>9} {'TTFT p50':>9} "
          f"{'p99':>8} {'err p50':>8} {'err p99':>8} {'ramp':>5}")
    for c in (int(x) for x in args.concurrency.split(",")):
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in clients}
        with FakeServer(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, tokenize_mode="off") as srv:
            for rep in range(args.reps):
                for name in (list(clients) if rep % 2 == 0 else list(reversed(clients))):
                    srv.reset()
                    src, n = clients[name], c * args.per_slot
                    res = (asyncio.run(_raw(srv.url, c, n, args.tokens)) if src is None
                           else run_latscope(src, srv.url, c, n, args.tokens))
                    res["err"] = _errors(srv, res.pop("ttft_by_id"))
                    res.pop("times", None)
                    rows[name].append(res)
        for name, runs in rows.items():
            def med(key: str, i: int | None = None) -> float:
                vals = [r[key] if i is None else r[key][i] for r in runs]
                return statistics.median(vals)
            ramp = runs[0]["ramp"]
            print(f"{c:>5} {name:<9} {med('in_flight'):>9.1f} {med('tok_s'):>9,.0f} "
                  f"{med('ttft_ms', 0):>9.1f} {med('ttft_ms', 1):>8.1f} {med('err', 0):>+8.2f} "
                  f"{med('err', 1):>+8.2f} {'-' if ramp is None else ramp:>5}", flush=True)
            print(f"{'':>15} runs in flight "
                  + " ".join(f"{r['in_flight']:.1f}" for r in runs)
                  + "; tok/s " + " ".join(f"{r['tok_s']:,.0f}" for r in runs))


if __name__ == "__main__":
    main()
