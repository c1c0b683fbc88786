#!/usr/bin/env python3
"""What watching costs the server: its TTFT with and without a ``latscope watch`` scraping its
``/metrics``, alternated (A B B A ...), with a paired 95% interval; and what each scrape took of
the server's time to render (``metrics/scrape.json`` of the watch).

    python3 benchmarks/passive_cost.py                     # the local CPU vLLM (under the lock)
    python3 benchmarks/passive_cost.py --url http://HOST:8000 --pairs 6 --interval 2,0.25

The load is ``latscope bench`` at a fixed concurrency with its own scraper off
(``--scrape-interval 0``), so the only scrapes are the watch's; each run draws fresh prompts
(its own ``--seed``). A is the server alone, B the same load with a watch running beside it.
The figure: the change of mean client TTFT from A to B per pair (log ratios, t interval), for
each scrape interval asked for; and the scrape's p50 / max render time, the one cost a scrape
puts on the server's API process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))
ENV = {**os.environ, "PYTHONPATH": f"{SRC}:{os.environ.get('PYTHONPATH', '')}"}


def bench(url: str, out: Path, seed: int, args: argparse.Namespace) -> float:
    cmd = [sys.executable, "-m", "latscope", "bench", "--url", url, "-n", str(args.requests),
           "-c", str(args.concurrency), "--input-len", "128", "--output-len", "32",
           "--warmup", str(args.concurrency), "--seed", str(seed), "--scrape-interval", "0",
           "--no-trace-requests", "--output-dir", str(out)]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return float(summary["ttft_ms"]["mean"])


def watched(url: str, out: Path, seed: int, interval: float, args: argparse.Namespace
            ) -> tuple[float, dict]:
    watch = subprocess.Popen([sys.executable, "-m", "latscope", "watch", url, "--interval",
                              str(interval), "-o", str(out / "watch")], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        scrapes = out / "watch" / "metrics" / "snapshots.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (scrapes.is_file() and scrapes.stat().st_size):
            time.sleep(0.1)  # scraping before the load starts
        ttft = bench(url, out / "bench", seed, args)
    finally:
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=120)
    cost = json.loads((out / "watch" / "metrics" / "scrape.json").read_text())
    return ttft, cost


def measure(url: str, interval: float, args: argparse.Namespace, work: Path) -> dict:
    from latscope.analysis.tune import paired_change

    alone, with_watch, costs = [], [], []
    for pair in range(args.pairs):
        order = ("A", "B") if pair % 2 == 0 else ("B", "A")
        for arm in order:
            seed = 1000 * (pair + 1) + (1 if arm == "B" else 0) + int(interval * 100)
            out = work / f"i{interval:g}-p{pair}-{arm}"
            if arm == "A":
                alone.append(bench(url, out, seed, args))
            else:
                ttft, cost = watched(url, out, seed, interval, args)
                with_watch.append(ttft)
                costs.append(cost)
        print(f"  interval {interval:g} s pair {pair + 1}: TTFT {alone[-1]:.1f} ms alone, "
              f"{with_watch[-1]:.1f} ms watched", flush=True)
    change = paired_change(alone, with_watch, higher_better=False)
    scrape = [c.get("scrape_ms") or {} for c in costs]
    return {"interval_s": interval, "alone_ms": alone, "watched_ms": with_watch,
            "change": change.get("change"), "ci": change.get("ci"),
            "verdict": change.get("verdict"),
            "scrape_ms_p50": max((s.get("p50") or 0) for s in scrape),
            "scrape_ms_max": max((s.get("max") or 0) for s in scrape),
            "scrapes": sum(c.get("scrapes") or 0 for c in costs)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a running server (default: start the local CPU vLLM)")
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--interval", default="2,0.25", help="watch scrape intervals to measure")
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=4)
    args = p.parse_args()
    intervals = [float(x) for x in args.interval.split(",")]
    with tempfile.TemporaryDirectory(prefix="passive-cost-") as tmp:
        if args.url:
            rows = [measure(args.url, i, args, Path(tmp)) for i in intervals]
        else:
            from latscope.server.target import LocalTarget

            with LocalTarget(log_dir=Path(tmp) / "server") as target:
                print(f"local vLLM at {target.url}", flush=True)
                rows = [measure(target.url, i, args, Path(tmp)) for i in intervals]
    print("\n| scrape every | pairs | mean TTFT alone | watched | change [95% CI] | "
          "scrape p50 / max |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ci = r["ci"]
        interval = f"[{ci[0]:+.1%}, {ci[1]:+.1%}]" if ci else "(no interval)"
        print(f"| {r['interval_s']:g} s | {len(r['alone_ms'])} | "
              f"{sum(r['alone_ms']) / len(r['alone_ms']):.1f} ms | "
              f"{sum(r['watched_ms']) / len(r['watched_ms']):.1f} ms | "
              f"{(r['change'] or 0):+.1%} {interval} ({r['verdict']}) | "
              f"{r['scrape_ms_p50']:.1f} / {r['scrape_ms_max']:.1f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
