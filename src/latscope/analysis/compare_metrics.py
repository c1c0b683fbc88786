"""Each figure ``latscope compare`` compares, measured on both sides with its intervals.

A side is one run or several repeated runs (their requests pooled for the within-run interval,
each run's figure one value of the between-run one). The figures: TTFT, TPOT, E2E and ITL means
and p50/p90/p99 (ITL pooled over tokens, the draws weighing whole requests), throughput (output
tokens/s and requests/s over the steady window, first send to last), goodput
(requests/s meeting an SLO, with one) and the error rate (a share: its change is in points).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from latscope.analysis.compare_sample import RunSample
from latscope.analysis.compare_stats import (
    DRAWS,
    Change,
    RunValues,
    between_runs,
    block_length,
    blocks_of,
    difference,
    draws_of,
    ratio_draws,
    relative_change,
    statistic,
)

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))
STATS = ("mean", "p50", "p90", "p99")

@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str  # "ttft_p99", "throughput", "errors"
    label: str  # "TTFT p99"
    unit: str  # "ms", "tok/s", "req/s", "% of requests"
    higher_is_better: bool
    relative: bool = True  # a ratio; False: a share, changed by a difference in points

    @property
    def stat(self) -> str:
        return self.name.rpartition("_")[2]

def catalogue(goodput: bool) -> list[MetricSpec]:
    """Every figure, in the order the report gives them."""
    specs = [MetricSpec(f"{key}_{stat}", f"{label} {stat}", "ms", False)
             for key, label in LATENCIES for stat in STATS]
    specs += [MetricSpec("throughput", "throughput", "tok/s", True),
              MetricSpec("rps", "requests/s", "req/s", True)]
    if goodput:
        specs.append(MetricSpec("goodput", "goodput", "req/s", True))
    specs.append(MetricSpec("errors", "error rate", "% of requests", False, relative=False))
    return specs

@dataclass(frozen=True, slots=True)
class Estimate:
    """One figure on both sides: values, the within-run and between-run changes, sizes."""

    spec: MetricSpec
    base: float | None
    new: float | None
    within: Change
    between: Change | None  # None: fewer than two runs on a side
    n_base: int  # the requests behind each side (ITL percentiles: the requests sampled)
    n_new: int
    sampled: str = ""  # a note when the figure rests on a sample of the requests

def estimate_all(base: Sequence[RunSample], new: Sequence[RunSample], *, goodput: bool,
                 draws: int = DRAWS, seed: int = 0) -> list[Estimate]:
    """Every figure of ``catalogue(goodput)``, BASE runs against NEW runs."""
    rng = np.random.default_rng(seed)
    out: list[Estimate] = []
    for key, _ in LATENCIES:
        if key == "itl":
            out += _itl(base, new, draws, rng)
        else:
            out += _latency(key, base, new, draws, rng)
    for spec in catalogue(goodput)[len(LATENCIES) * len(STATS):]:
        out.append(_rate(spec, base, new, draws, rng))
    return out

def _block(sample: RunSample, n: int) -> int:
    return block_length(n, _wave(sample))

def _wave(sample: RunSample) -> int | None:
    flight = sample.in_flight()
    return int(math.ceil(flight)) if flight else None

def _latency(key: str, base: Sequence[RunSample], new: Sequence[RunSample], draws: int,
             rng: np.random.Generator) -> list[Estimate]:
    def values(s: RunSample) -> np.ndarray:
        v = getattr(s, key)
        return v[~np.isnan(v)]

    sides = [[RunValues(values(s), _block(s, values(s).size)) for s in side]
             for side in (base, new)]
    return _compare(key, sides, draws, rng)

def _itl(base: Sequence[RunSample], new: Sequence[RunSample], draws: int,
         rng: np.random.Generator) -> list[Estimate]:
    """Mean ITL as summed gaps over counted gaps per request (every request); its
    percentiles pooled over the gaps of the sampled requests, draws weighing whole requests."""
    sides = [[RunValues(s.itl_gaps, _block(s, s.itl_sampled), s.itl_request, s.itl_sampled)
              for s in side] for side in (base, new)]
    estimates = _compare("itl", sides, draws, rng, stats=STATS[1:])
    spec = MetricSpec("itl_mean", "ITL mean", "ms", False)
    parts = [[(s.itl_sum, s.itl_count, _block(s, s.itl_sum.size)) for s in side]
             for side in (base, new)]
    points = [_ratio_point(p) for p in parts]
    within = relative_change(points[0], points[1], ratio_draws(parts[0], draws=draws, rng=rng),
                             ratio_draws(parts[1], draws=draws, rng=rng),
                             units=_blocks(parts))
    between = _between([[_ratio_point([p]) for p in side] for side in parts], True)
    mean = Estimate(spec, points[0], points[1], within, between,
                    sum(s.itl_requests for s in base), sum(s.itl_requests for s in new))
    sampled = [f"{s.itl_sampled} of {s.itl_requests}" for s in [*base, *new]
               if s.itl_sampled < s.itl_requests]
    note = f"ITL percentiles over a sample of requests ({', '.join(sampled)})" if sampled else ""
    return [mean, *(Estimate(e.spec, e.base, e.new, e.within, e.between, e.n_base, e.n_new,
                             note) for e in estimates)]

def _ratio_point(parts: Sequence[tuple[np.ndarray, np.ndarray, int]]) -> float | None:
    num = sum(float(n.sum()) for n, _, _ in parts)
    den = sum(float(d.sum()) for _, d, _ in parts)
    return num / den if den > 0 else None

def _compare(key: str, sides: list[list[RunValues]], draws: int, rng: np.random.Generator,
             stats: Sequence[str] = STATS) -> list[Estimate]:
    label = dict(LATENCIES)[key]
    drawn = [draws_of(side, stats, draws=draws, rng=rng) for side in sides]
    out = []
    for stat in stats:
        points = [statistic(np.concatenate([r.values for r in side]), stat)
                  if any(r.values.size for r in side) else None for side in sides]
        per_run = [[statistic(r.values, stat) for r in side] for side in sides]
        out.append(Estimate(MetricSpec(f"{key}_{stat}", f"{label} {stat}", "ms", False),
                            points[0], points[1],
                            relative_change(points[0], points[1], drawn[0][stat],
                                            drawn[1][stat], units=_units(sides)),
                            _between(per_run, True),
                            sum(r.units for r in sides[0]), sum(r.units for r in sides[1])))
    return out

def _units(sides: list[list[RunValues]]) -> int:
    """The blocks the shorter side is drawn as: what its interval rests on."""
    return min(sum(blocks_of(r.units, r.block) for r in side) for side in sides)


def _blocks(parts: list[list[tuple[np.ndarray, np.ndarray, int]]]) -> int:
    return min(sum(blocks_of(a.size, block) for a, _, block in side) for side in parts)


def _between(per_run: list[list[float | None]], relative: bool) -> Change | None:
    if min(len(per_run[0]), len(per_run[1])) < 2:
        return None
    return between_runs(per_run[0], per_run[1], relative=relative)

# --- throughput, goodput, errors --------------------------------------------------------------

def _amounts(s: RunSample, what: str, upto: int) -> np.ndarray:
    """Per request in send order: its output tokens, 1 if it completed, or 1 if it met the
    SLO (a failed request: 0)."""
    done = ~s.failed[:upto]
    if what == "tokens":
        return np.where(done, s.output_tokens[:upto], 0.0)
    if what == "good":
        good = s.good if s.good is not None else np.zeros(s.failed.size, dtype=bool)
        return good[:upto].astype(np.float64)
    return done.astype(np.float64)


def _paced(s: RunSample, what: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(amount, seconds) per request in send order, whose sums over the steady window (first
    send to last) are the throughput: the request's amount and the time to the next send."""
    if s.origins.size < 3:
        return None
    gaps = np.diff(s.origins).astype(np.float64) / 1e9
    return (_amounts(s, what, gaps.size), gaps) if gaps.sum() > 0 else None


def _rate_draws(s: RunSample, what: str, point: float, draws: int, rng: np.random.Generator
                ) -> np.ndarray:
    """Draws of one run's throughput. Open loop: blocks of (amount, gap to the next send)
    resampled, the gaps being the arrivals' own spread. Closed loop: each slot sends when its
    last request ends, so throughput is the slots over the mean request time (Little's law)
    and moves as amount / E2E does: its draws, scaled to the measured rate. (The send gaps of
    a closed loop come in waves, 7 near nothing and one long at c=8; their blocks drew an
    interval 1.6 times as wide as E2E's own on the same runs: docs/compare.md.)"""
    if not s.closed_loop:
        paced = _paced(s, what)
        assert paced is not None
        return ratio_draws([(paced[0], paced[1], _block(s, paced[0].size))], draws=draws,
                           rng=rng)
    ok = ~np.isnan(s.e2e)
    amount, e2e = _amounts(s, what, s.failed.size)[ok], s.e2e[ok] / 1e3
    if not amount.size or amount.sum() <= 0:
        return np.empty(0)
    drawn = ratio_draws([(amount, e2e, _block(s, amount.size))], draws=draws, rng=rng)
    return drawn * (point / (amount.sum() / e2e.sum()))


def _rate(spec: MetricSpec, base: Sequence[RunSample], new: Sequence[RunSample], draws: int,
          rng: np.random.Generator) -> Estimate:
    if spec.name == "errors":
        return _errors(spec, base, new, draws, rng)
    what = {"throughput": "tokens", "rps": "requests", "goodput": "good"}[spec.name]
    sides = [[(s, p) for s in side if (p := _paced(s, what)) is not None]
             for side in (base, new)]
    per_run = [[_ratio_point([(a, g, 1)]) for _, (a, g) in side] for side in sides]
    points = [_ratio_point([(a, g, 1) for _, (a, g) in side]) if side else None
              for side in sides]
    drawn = [_pooled_rates(side, rates, what, draws, rng) for side, rates in zip(sides, per_run)]
    within = relative_change(points[0], points[1], drawn[0], drawn[1],
                             units=_blocks([[(a, g, _block(s, a.size)) for s, (a, g) in side]
                                            for side in sides]))
    return Estimate(spec, points[0], points[1], within, _between(per_run, True),
                    sum(a.size for _, (a, _) in sides[0]), sum(a.size for _, (a, _) in sides[1]))


def _pooled_rates(side: list[tuple[RunSample, tuple[np.ndarray, np.ndarray]]],
                  rates: list[float | None], what: str, draws: int, rng: np.random.Generator
                  ) -> np.ndarray | None:
    """A side's throughput draws: each run's, combined as its pooled rate is (summed amounts
    over summed windows: each run's rate weighted by its window)."""
    if not side:
        return None
    total = np.zeros(draws)
    windows = 0.0
    for (s, (_, gaps)), rate in zip(side, rates):
        if rate is None or rate <= 0:
            return None
        one = _rate_draws(s, what, rate, draws, rng)
        if one.size != draws:
            return None
        total += one * gaps.sum()
        windows += gaps.sum()
    return total / windows


def _errors(spec: MetricSpec, base: Sequence[RunSample], new: Sequence[RunSample], draws: int,
            rng: np.random.Generator) -> Estimate:
    sides = [[RunValues(s.failed.astype(float), _block(s, s.measured)) for s in side]
             for side in (base, new)]
    points = [_share(side) for side in sides]
    drawn = [draws_of(side, ("mean",), draws=draws, rng=rng)["mean"] for side in sides]
    per_run = [[_share([r]) for r in side] for side in sides]
    return Estimate(spec, points[0], points[1],
                    difference(points[0], points[1], drawn[0], drawn[1], units=_units(sides)),
                    _between(per_run, False),
                    sum(r.units for r in sides[0]), sum(r.units for r in sides[1]))

def _share(runs: Sequence[RunValues]) -> float | None:
    total = sum(r.values.size for r in runs)
    return sum(float(r.values.sum()) for r in runs) / total if total else None
