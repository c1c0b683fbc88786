"""Figures for server observation: /metrics parse cost, log parse speed, and the scraper's cost
to the load generator's event loop (the lag it adds while scraping a real 50 kB vLLM page).

Run: ``python3 benchmarks/bench_observe.py [--repeat 5]`` (reads ../shared/fixtures beside the repo).
Prints medians over the repeats; the host's other load adds noise, so compare runs on one host.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from aiohttp import web

from latscope.model import RunContext
from latscope.server.logs import parse_log
from latscope.server.metrics import parse_metrics_text
from latscope.server.scrape import MetricsScraper

FIXTURES = Path(__file__).resolve().parent.parent.parent / "shared" / "fixtures" / "vllm"


def metrics_parse_ms(repeat: int) -> dict[str, float]:
    out = {}
    for rel in ("h200-vllm0.26/metrics_after_c512.txt", "cpu-vllm0.32/metrics.txt"):
        text = (FIXTURES / rel).read_text()
        times = []
        for _ in range(repeat * 4):
            t0 = time.perf_counter()
            parse_metrics_text(text)
            times.append((time.perf_counter() - t0) * 1e3)
        out[f"{rel} ({len(text)} B)"] = statistics.median(times)
    return out


def log_parse_rate(repeat: int) -> dict[str, float]:
    out = {}
    for rel in ("h200-vllm0.26/server.log", "cpu-vllm0.32/server_debug.log"):
        path = FIXTURES / rel
        lines = path.read_text(errors="replace").splitlines()
        big = lines * 20
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            parse_log(big)
            times.append(time.perf_counter() - t0)
        out[rel] = len(big) / statistics.median(times)
    return out


async def _loop_lag(duration_s: float, tick_s: float = 0.001) -> list[float]:
    """Lateness (ms) of each wake-up of a ``sleep(tick_s)`` loop: what a request timer would see."""
    lags = []
    end = time.perf_counter() + duration_s
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        await asyncio.sleep(tick_s)
        lags.append((time.perf_counter() - t0 - tick_s) * 1e3)
    return lags


async def scraper_lag(interval_s: float, duration_s: float, live: bool) -> dict[str, float]:
    page = (FIXTURES / "h200-vllm0.26/metrics_after_c512.txt").read_text()
    app = web.Application()
    app.router.add_get("/metrics", lambda request: web.Response(text=page))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        base = await _loop_lag(duration_s)
        with tempfile.TemporaryDirectory() as tmp:
            ctx = RunContext(f"http://127.0.0.1:{port}", Path(tmp), {}, time.perf_counter_ns(),
                             time.time())
            scraper = MetricsScraper(interval_s=interval_s, parse_during_run=live)
            await scraper.start(ctx)
            with_scraper = await _loop_lag(duration_s)
            t0 = time.perf_counter()
            await scraper.stop(ctx)
            stop_s = time.perf_counter() - t0
            summary = scraper.summary()
    finally:
        await runner.cleanup()
    q = statistics.quantiles
    return {"loop lag p99 ms, no scraper": q(base, n=100)[98],
            "loop lag max ms, no scraper": max(base),
            "loop lag p99 ms, scraping": q(with_scraper, n=100)[98],
            "loop lag max ms, scraping": max(with_scraper),
            "scrape_ms mean": summary["scrape_ms"]["mean"],
            "parse_ms mean (worker thread)": summary["parse_ms"]["mean"],
            "stop() s (deferred parsing happens here)": stop_s,
            "scrapes": summary["scrapes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.1, help="scrape interval for the lag test")
    parser.add_argument("--duration", type=float, default=3.0)
    args = parser.parse_args()
    print("parse_metrics_text, median ms:")
    for name, ms in metrics_parse_ms(args.repeat).items():
        print(f"  {name}: {ms:.2f} ms")
    print("parse_log, median lines/s:")
    for name, rate in log_parse_rate(args.repeat).items():
        print(f"  {name}: {rate:,.0f} lines/s")
    print(f"event-loop lag (1 ms sleep loop), scraping every {args.interval} s for {args.duration} s:")
    for live in (False, True):
        print(f"  parse_during_run={live}:")
        runs = [asyncio.run(scraper_lag(args.interval, args.duration, live))
                for _ in range(args.repeat)]
        for key in runs[0]:
            print(f"    {key}: {statistics.median(r[key] for r in runs):.3f}")


if __name__ == "__main__":
    main()
