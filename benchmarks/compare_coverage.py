"""Does ``latscope compare``'s 95% interval hold the true change 95% of the time?

Synthetic runs with a known truth: per-request latencies lognormal (sigma 0.6, a TTFT-like
skew), NEW = BASE x 1.2 (every statistic changes by +20%). Two kinds of runs:

- independent: every request its own draw;
- in waves: requests in waves of 8 (a closed loop at c=8) share one lognormal(0, 0.3) factor,
  the server's moment (a batch, a busy host): requests close in time are alike.

For each run length and statistic, the share of ``--trials`` pairs whose interval holds +20%,
and the intervals' median width (points): with an i.i.d. bootstrap's percentile interval, with a
block bootstrap's (blocks of one wave at least: ``analysis.compare_stats.block_length``), and
with that one expanded for its number of blocks (``analysis.compare_stats.expansion``): what
latscope uses. The measurement behind the blocks, the expansion, and the run lengths a tail
needs (``findings.compare.TAIL_REQUESTS``).

    python3 benchmarks/compare_coverage.py [--trials 200] [--draws 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from latscope.analysis.compare_stats import (  # noqa: E402
    RunValues,
    block_length,
    blocks_of,
    draws_of,
    relative_change,
    statistic,
)

STATS = ("mean", "p50", "p90", "p99")
FACTOR = 1.2


def _run(rng: np.random.Generator, n: int, waves: bool) -> np.ndarray:
    values = rng.lognormal(3, 0.6, n)
    if waves:
        values *= np.repeat(rng.lognormal(0, 0.3, -(-n // 8)), 8)[:n]
    return values


def coverage(n: int, waves: bool, trials: int, draws: int, seed: int
             ) -> dict[str, dict[str, tuple[float, float]]]:
    """{way: {stat: (coverage, median width)}} for the three ways of drawing the interval."""
    rng = np.random.default_rng(seed)
    ways = ("iid", "blocks", "expanded")
    hits = {w: {s: 0 for s in STATS} for w in ways}
    widths: dict[str, dict[str, list[float]]] = {w: {s: [] for s in STATS} for w in ways}
    block = block_length(n, 8)
    for _ in range(trials):
        runs = [_run(rng, n, waves), FACTOR * _run(rng, n, waves)]
        iid = [draws_of([RunValues(v, 1)], STATS, draws=draws, rng=rng) for v in runs]
        blocked = [draws_of([RunValues(v, block)], STATS, draws=draws, rng=rng) for v in runs]
        for s in STATS:
            points = statistic(runs[0], s), statistic(runs[1], s)
            for way, drawn, units in (("iid", iid, None), ("blocks", blocked, None),
                                      ("expanded", blocked, blocks_of(n, block))):
                c = relative_change(*points, drawn[0][s], drawn[1][s], units=units)
                if c.lo is None or c.hi is None:
                    continue
                hits[way][s] += c.lo <= FACTOR - 1 <= c.hi
                widths[way][s].append(c.hi - c.lo)
    return {w: {s: (hits[w][s] / trials, float(np.median(widths[w][s])) if widths[w][s]
                    else float("nan")) for s in STATS} for w in ways}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--sizes", default="64,200,1000")
    p.add_argument("--waves-only", action="store_true")
    args = p.parse_args()
    started = time.monotonic()
    print(f"coverage of the 95% interval of a +20% change, {args.trials} pairs each "
          f"({args.draws} draws); width: the interval's median width in points")
    print(f"{'runs':13} {'n':>5} {'stat':5} {'i.i.d.':>13} {'blocks':>13} "
          f"{'expanded':>13}")
    for waves in (False, True):
        for n in map(int, args.sizes.split(",")):
            if args.waves_only and not waves:
                continue
            found = coverage(n, waves, args.trials, args.draws, seed=n)
            for s in STATS:
                cells = " ".join(f"{found[w][s][0]:6.1%} {found[w][s][1] * 100:6.1f}"
                                 for w in ("iid", "blocks", "expanded"))
                print(f"{'in waves of 8' if waves else 'independent':13} {n:5} {s:5} {cells}",
                      flush=True)
    print(f"({time.monotonic() - started:.0f} s; a true 95% coverage measures within about "
          f"+-{1.96 * (0.95 * 0.05 / args.trials) ** 0.5:.1%} of 95% over {args.trials} pairs)")


if __name__ == "__main__":
    main()
