"""The statistics of ``latscope compare``: how much a figure changed from BASE to NEW, with a 95%
interval, from the per-request records of each run, or from the figures of repeated runs.

Within one run (the *within-run* interval): a circular block bootstrap over the requests in the
order they were sent. Requests sent close together share the server's batch, its queue and the
host's moment, so they are not independent draws; resampling blocks of consecutive requests
keeps that dependence inside each draw, where an i.i.d. bootstrap would treat it as information
and give intervals too narrow (docs/compare.md measures both). The percentile interval is then
expanded for the few blocks it rests on (``expansion``). Each draw is a vector of
*weights* (how many times each request was drawn), so a mean is a weighted mean and a quantile
the weighted inverted-CDF one, computed on values sorted once: no draw copies the values.
The change is the ratio NEW/BASE of a statistic; its interval the 2.5-97.5% quantiles of the
ratio of independent draws of the two runs (a percentile interval on the log ratio, symmetric
for gains and losses). A share (the error rate) changes by a difference, in points.

Between runs (repeated runs on each side): each run's figure is one value, and the interval is
Welch's t on the log figures: the spread from one run to the next, which per-request resampling
of a single run cannot see (a server restarted, another moment of the host).

Quantiles are inverted-CDF ones (the smallest value with at least q of the weight at or below
it), the definition a weighted draw can compute exactly; with many requests they agree with
``summary.json``'s interpolated ones to within one request's value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
DRAWS = 2000  # bootstrap draws: the 2.5% tail rests on 50 of them
_CHUNK_CELLS = 1 << 22  # draws x values held at once (float64: 32 MiB)


@dataclass(frozen=True, slots=True)
class Change:
    """A change with its interval: relative (NEW/BASE - 1) or, for shares, a difference in
    points (NEW - BASE, as fractions). ``lo``/``hi`` are None where no interval exists."""

    point: float | None
    lo: float | None = None
    hi: float | None = None
    relative: bool = True

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def width(self) -> float:
        if self.lo is None or self.hi is None:
            return math.inf
        return self.hi - self.lo


MIN_BLOCKS = 8  # a run is drawn as this many blocks at least


def block_length(n: int, in_flight: int | None = None) -> int:
    """Requests per bootstrap block: two waves of the requests in flight together (they share
    the batch; a block that starts mid-wave still holds a whole one), at least n^(1/3) (the
    usual rate for a block bootstrap), and short enough for ``MIN_BLOCKS`` blocks a run."""
    if n <= 1:
        return 1
    wanted = max(2 * (in_flight or 1), round(n ** (1 / 3)))
    return int(max(1, min(wanted, n // MIN_BLOCKS or 1)))


def block_weights(n: int, block: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``draws`` x ``n`` multiplicities of a circular block bootstrap: ceil(n / block) blocks
    of ``block`` consecutive requests each, starting anywhere (wrapping past the end)."""
    if n == 0:
        return np.zeros((draws, 0))
    block = max(1, min(block, n))
    starts = rng.integers(0, n, size=(draws, -(-n // block)))
    flat = (starts + (np.arange(draws) * n)[:, None]).ravel()
    # int32 counts: exact, and half the memory traffic of float64 in the cumulative sums
    counts = np.bincount(flat, minlength=draws * n).reshape(draws, n).astype(np.int32)
    if block == 1:
        return counts
    # a request's weight: the blocks that started within ``block`` places before it (circular)
    padded = np.concatenate([counts[:, n - block + 1:], counts], axis=1)
    running = np.cumsum(padded, axis=1, dtype=np.int32)
    running = np.concatenate([np.zeros((draws, 1), dtype=np.int32), running], axis=1)
    return running[:, block:] - running[:, :-block]


def statistic(values: np.ndarray, stat: str, weights: np.ndarray | None = None) -> float | None:
    """``mean`` or ``pNN`` of ``values`` (NaN-free), weighted by ``weights`` when given."""
    if values.size == 0:
        return None
    w = np.ones(values.size) if weights is None else weights
    return float(weighted_stats(values, w[None, :], (stat,))[stat][0])


def weighted_stats(values: np.ndarray, weights: np.ndarray, stats: Sequence[str],
                   order: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Each statistic of ``values`` under each row of ``weights`` (draws x values);
    ``order``: ``values``' sorting permutation, where the caller has it."""
    totals = weights.sum(axis=1)
    out: dict[str, np.ndarray] = {}
    if "mean" in stats:
        out["mean"] = (weights @ values) / totals
    quantiles = [s for s in stats if s != "mean"]
    if quantiles:
        if order is None:
            order = np.argsort(values, kind="stable")
        sorted_values = values[order]
        cum = np.cumsum(weights[:, order], axis=1,
                        dtype=np.int32 if weights.dtype == np.int32 else np.float64)
        for s in quantiles:
            # the first value whose cumulated weight reaches q of the total (inverted CDF)
            target = (float(s[1:]) / 100 * totals * (1 - 1e-12))[:, None]
            idx = np.minimum((cum < target).sum(axis=1), values.size - 1)
            out[s] = sorted_values[idx]
    return out


@dataclass(frozen=True, slots=True)
class RunValues:
    """One run's values of a metric, in send order, and its bootstrap block length.
    ``owner``: for a pooled metric (ITL: many values a request), the request of each value,
    so that draws weigh whole requests; ``requests`` is then how many requests there are."""

    values: np.ndarray
    block: int
    owner: np.ndarray | None = None
    requests: int | None = None

    @property
    def units(self) -> int:
        return self.values.size if self.owner is None else int(self.requests or 0)


def draws_of(runs: Sequence[RunValues], stats: Sequence[str], *, draws: int,
             rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Bootstrap draws of each statistic over one side's runs pooled: every run resampled in
    its own blocks (a stratified draw: each run keeps its size), the values then pooled."""
    runs = [r for r in runs if r.values.size]
    if not runs:
        return {s: np.empty(0) for s in stats}
    values = np.concatenate([r.values for r in runs])
    order = np.argsort(values, kind="stable") if any(s != "mean" for s in stats) else None
    out: dict[str, list[np.ndarray]] = {s: [] for s in stats}
    per = max(1, _CHUNK_CELLS // values.size)
    for start in range(0, draws, per):
        size = min(per, draws - start)
        parts = []
        for r in runs:
            w = block_weights(r.units, r.block, size, rng)
            parts.append(w if r.owner is None else w[:, r.owner])
        for s, v in weighted_stats(values, np.hstack(parts), stats, order).items():
            out[s].append(v)
    return {s: np.concatenate(v) for s, v in out.items()}


def ratio_draws(runs: Sequence[tuple[np.ndarray, np.ndarray, int]], *, draws: int,
                rng: np.random.Generator) -> np.ndarray:
    """Draws of sum(numerator) / sum(denominator) over one side's runs, each run's units
    (requests, time slices) resampled in its own blocks: a ratio estimator (mean ITL is
    summed gaps over counted gaps; a throughput is tokens over time)."""
    out = []
    per = max(1, _CHUNK_CELLS // max(1, sum(num.size for num, _, _ in runs)))
    for start in range(0, draws, per):
        size = min(per, draws - start)
        num = np.zeros(size)
        den = np.zeros(size)
        for n_values, d_values, block in runs:
            if n_values.size:
                w = block_weights(n_values.size, block, size, rng)
                num += w @ n_values
                den += w @ d_values
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append(np.where(den > 0, num / np.where(den > 0, den, 1), np.nan))
    return np.concatenate(out) if out else np.empty(0)


def expansion(units: int | None, confidence: float = CONFIDENCE) -> float:
    """How much wider a percentile interval is drawn when it rests on ``units`` resampled
    units (blocks): t over z, times sqrt(k / (k - 1)), the expanded percentile interval
    (Hesterberg 2015). A bootstrap of k units sees their spread with k, not k - 1, degrees of
    freedom, and a normal, not a t, tail: with 8 blocks its interval of a mean covered 91.5%,
    not 95% (docs/compare.md); 1.29x wider at k = 8, 1.03x at 64, 1 for many."""
    if units is None:
        return 1.0
    if units < 2:
        return math.inf
    from scipy.special import ndtri, stdtrit  # t and normal quantiles (scipy.stats: 3 s import)

    level = (1 + confidence) / 2
    return float(stdtrit(units - 1, level) / ndtri(level) * math.sqrt(units / (units - 1)))


def _expanded(point: float, lo: float, hi: float, units: int | None) -> tuple[float, float]:
    factor = expansion(units)
    return point - factor * (point - lo), point + factor * (hi - point)


def relative_change(base: float | None, new: float | None, base_draws: np.ndarray | None,
                    new_draws: np.ndarray | None, confidence: float = CONFIDENCE,
                    units: int | None = None) -> Change:
    """NEW/BASE - 1, its interval from the ratio of independent draws (None where either is
    not positive: a ratio of a zero has no meaning), expanded for ``units`` (``expansion``)."""
    if base is None or new is None or base <= 0 or new <= 0:
        return Change(None)
    point = new / base - 1
    if base_draws is None or new_draws is None or not base_draws.size or not new_draws.size:
        return Change(point)
    ok = (base_draws > 0) & (new_draws > 0)
    if ok.mean() < 0.99:  # a statistic that is often zero in a draw: no ratio to speak of
        return Change(point)
    logs = np.log(new_draws[ok]) - np.log(base_draws[ok])
    lo, hi = np.quantile(logs, [(1 - confidence) / 2, (1 + confidence) / 2])
    lo, hi = _expanded(math.log(new / base), float(lo), float(hi), units)
    if not math.isfinite(lo) or not math.isfinite(hi):
        return Change(point)
    return Change(point, math.expm1(lo), math.expm1(hi))


def difference(base: float | None, new: float | None, base_draws: np.ndarray | None,
               new_draws: np.ndarray | None, confidence: float = CONFIDENCE,
               units: int | None = None) -> Change:
    """NEW - BASE of a share (the error rate), in fractions, with its interval."""
    if base is None or new is None:
        return Change(None, relative=False)
    point = new - base
    if base_draws is None or new_draws is None or not base_draws.size or not new_draws.size:
        return Change(point, relative=False)
    lo, hi = np.quantile(new_draws - base_draws, [(1 - confidence) / 2, (1 + confidence) / 2])
    lo, hi = _expanded(point, float(lo), float(hi), units)
    if not math.isfinite(lo) or not math.isfinite(hi):
        return Change(point, relative=False)
    return Change(point, lo, hi, relative=False)


def blocks_of(units: int, block: int) -> int:
    """How many blocks a run of ``units`` resampled in blocks of ``block`` is drawn as."""
    return -(-units // max(1, block)) if units else 0


def between_runs(base: Sequence[float | None], new: Sequence[float | None], *,
                 relative: bool = True, confidence: float = CONFIDENCE) -> Change:
    """The change of a figure measured once per run, over repeated runs on each side: Welch's t
    interval on the log figures (relative), or on the figures (a share). None below 2 runs a
    side: one run says nothing of how runs spread."""
    from scipy.special import stdtrit  # Student's t quantile

    a = np.array([v for v in base if v is not None and (v > 0 or not relative)], dtype=float)
    b = np.array([v for v in new if v is not None and (v > 0 or not relative)], dtype=float)
    if not a.size or not b.size:
        return Change(None, relative=relative)
    if relative:
        a, b = np.log(a), np.log(b)
    diff = float(b.mean() - a.mean())
    point = math.expm1(diff) if relative else diff
    if a.size < 2 or b.size < 2:
        return Change(point, relative=relative)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        lo = hi = diff
    else:
        df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
        half = float(stdtrit(df, (1 + confidence) / 2)) * se
        lo, hi = diff - half, diff + half
    if relative:
        return Change(point, math.expm1(lo), math.expm1(hi))
    return Change(point, lo, hi, relative=False)


def wider(first: Change, second: Change) -> tuple[Change, int]:
    """The change whose interval is wider (a missing interval is widest); its index."""
    return (second, 1) if second.has_interval and second.width > first.width or \
        (not first.has_interval and second.point is not None) else (first, 0)


def min_requests(stat: str, tail: int) -> int:
    """Requests a run needs for an interval on ``stat`` to hold its coverage: ``tail``
    requests beyond the quantile (a p99 of 100 requests rests on its largest one, and the
    bootstrap cannot know what lies past it). A mean needs ``tail`` requests in all."""
    if stat == "mean":
        return tail
    q = float(stat[1:]) / 100
    return int(math.ceil(tail / min(q, 1 - q) - 1e-9))
