"""Does latscope's memory stay flat over a long run, and what does it cost per token?

One long closed-loop ``bench`` against the local fake server (``tests/fakeserver.py``, its own
process, zero delay: as fast as the client can go) prints, when 1k, 10k and 100k requests have
finished, the client's resident memory now (RSS) and at its peak, and at the end the client's CPU
time per streamed token. The bar (issue #14): peak RSS flat within 20 MB from 10k to 100k
requests. Words are taken as tokens (the fake server's /tokenize is turned off), so prompts are
built as they are sent (``latscope.load.promptsource``): the first before the run (their memory
is in every row), the rest during it, their CPU time in the figure per token. Usage::

    python3 benchmarks/soak.py [--requests 100000] [--concurrency 64] [--output-len 16]

Run it with ``PYTHONPATH=<another checkout>/src`` to compare with another version of latscope
(its ``run_bench(config, on_record=...)`` is all this script uses).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeserver import FakeServer  # noqa: E402
from latscope.load import BenchConfig, run_bench  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--input-len", default="16")
    parser.add_argument("--output-len", default="16")
    args = parser.parse_args()
    marks = sorted({m for m in (1_000, 10_000, 100_000, args.requests) if m <= args.requests})
    rows: list[tuple[int, float, float, float]] = []
    done = 0
    t0 = time.perf_counter()

    def on_record(_record: object) -> None:
        nonlocal done
        done += 1
        if done in marks:
            rows.append((done, rss_mb(), peak_mb(), time.perf_counter() - t0))
            print(f"  {done:>9,} requests: RSS {rows[-1][1]:7.1f} MB, peak {rows[-1][2]:7.1f} MB "
                  f"({rows[-1][3]:.0f} s)", flush=True)

    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{args.requests:,} requests, concurrency {args.concurrency}, "
          f"{args.input_len} in / {args.output_len} out; RSS before: {rss_mb():.1f} MB")
    with FakeServer(ttft_ms=0, itl_ms=0, tokenize_mode="off") as srv, \
            tempfile.TemporaryDirectory(prefix="latscope-soak-") as tmp:
        config = BenchConfig(url=srv.url, model="fake-model", num_requests=args.requests,
                             concurrency=args.concurrency, output_dir=Path(tmp) / "run")
        config.workload.input_len, config.workload.output_len = args.input_len, args.output_len
        result = run_bench(config, on_record=on_record)
    s, client = result.summary, result.summary["client"]
    print(f"completed {s['requests']['completed']:,}, failed {s['requests']['failed']:,}; "
          f"client CPU {client['cpu_us_per_output_token']:.2f} us per output token "
          f"({client['cpu_utilization']:.0%} of a core); "
          f"{s['throughput']['output_tokens_per_s']:,.0f} tok/s")
    by_mark = {n: peak for n, _, peak, _ in rows}
    if 10_000 in by_mark and 100_000 in by_mark:
        growth = by_mark[100_000] - by_mark[10_000]
        print(f"peak RSS growth 10k -> 100k: {growth:+.1f} MB "
              f"({'within' if growth <= 20 else 'OVER'} the 20 MB bar)")


if __name__ == "__main__":
    main()
