"""How many server restarts `latscope tune` needs, against the full grid, and how often it is right.

Runs the search strategies of ``latscope.analysis.search`` on synthetic throughput surfaces over
max_num_seqs x max_num_batched_tokens (unimodal along each flag, with an interaction term), with
and without multiplicative measurement noise, and prints per surface: grid size, evaluations
(= restarts) used by the coordinate search, and the share of seeds whose chosen configuration
is within 5% of the true optimum (the grid's noiseless best). No server is started: this measures
the search, not vLLM.

    python3 benchmarks/tune_search_restarts.py [--seeds 200]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

from latscope.analysis.search import Outcome, coordinate_search, grid, grid_search, parse_param

SEQS = parse_param("max_num_seqs=16..1024")  # 7 values
MBT = parse_param("max_num_batched_tokens=1024..32768")  # 6 values


def surface(peak_s: float, peak_m: float, inter: float, m_weight: float = 3.0):
    def f(cfg) -> float:
        s, m = math.log2(cfg["max_num_seqs"]), math.log2(cfg["max_num_batched_tokens"])
        return 400.0 - 5 * (s - peak_s) ** 2 - m_weight * (m - peak_m) ** 2 \
            - inter * (s - peak_s) * (m - peak_m)
    return f


SURFACES = {
    "peak inside, no interaction": surface(8, 13, 0.0),
    "peak inside, interaction": surface(7, 12, 3.0),
    "peak at the corner": surface(10, 15, 1.0),
    "flat along MBT": surface(9, 12, 0.0, m_weight=0.0),
}


def run(seeds: int, noise: float) -> None:
    print(f"\nnoise: +-{noise:.0%} multiplicative (uniform), min_gain {max(0.03, noise):.2f}, {seeds} seeds")
    print(f"{'surface':32} {'grid':>5} {'coord restarts (median, max)':>30} {'within 5% of best':>18}"
          f" {'grid within 5%':>15}")
    for name, fn in SURFACES.items():
        true_best = max(fn(c) for c in grid([SEQS, MBT]))
        assert min(fn(c) for c in grid([SEQS, MBT])) > 0  # "within 5%" needs positive values
        used, right, grid_right = [], 0, 0
        for seed in range(seeds):
            rng = random.Random(seed)
            noisy = lambda cfg: Outcome(True, fn(cfg) * (1 + rng.uniform(-noise, noise)))  # noqa: E731
            res = coordinate_search([SEQS, MBT], noisy, min_gain=max(0.03, noise))
            used.append(res.evaluated)
            right += fn(res.best) >= 0.95 * true_best
            g = grid_search([SEQS, MBT], noisy)
            grid_right += fn(g.best) >= 0.95 * true_best
        print(f"{name:32} {len(SEQS.values) * len(MBT.values):5d} "
              f"{statistics.median(used):>22g}, {max(used):>5d} {right / seeds:>18.0%} "
              f"{grid_right / seeds:>15.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200)
    args = parser.parse_args()
    for noise in (0.0, 0.05, 0.10):
        run(args.seeds if noise else 1, noise)


if __name__ == "__main__":
    main()
