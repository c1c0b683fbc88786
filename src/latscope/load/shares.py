"""Each bench worker's share of a run's measured requests (pure functions; the split rules are
``latscope.load.workers``' docstring's): closed loop, slots even and requests by slots; open loop,
the one global arrival schedule thinned per worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from latscope.errors import ConfigError
from latscope.load.arrival import arrival_offsets_ns
from latscope.load.config import BenchConfig

DURATION_INDEX_SPAN = 10**9  # closed-loop --duration runs: indices are drawn from this span


@dataclass
class Share:
    """What one worker sends: ``indices`` (into the prompt pool) and, open loop, each one's
    scheduled offset from the common start; ``concurrency`` is its slots (closed loop) or its
    cap on requests in flight (open loop, None: no cap)."""

    worker: int
    indices: Sequence[int]
    offsets_ns: list[int] | None
    concurrency: int | None
    # a closed loop's measured requests (its stagger's ramp sends more, from the same indices)
    measured: int | None = None

    @property
    def size(self) -> int | None:
        """Measured requests this share sends at most (None: until the duration ends)."""
        if self.measured is not None:
            return self.measured
        return None if len(self.indices) >= DURATION_INDEX_SPAN // 2 else len(self.indices)


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one (larger ones first)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def split_proportionally(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder; sums to ``total``)."""
    w = np.asarray(weights, dtype=np.float64)
    exact = total * w / w.sum()
    counts = np.floor(exact).astype(np.int64)
    for i in np.argsort(-(exact - counts), kind="stable")[: total - int(counts.sum())]:
        counts[i] += 1
    return counts.tolist()


def plan_shares(config: BenchConfig, workers: int, pool_size: int) -> list[Share]:
    """Each worker's share of the measured requests (warm-up is the driver's)."""
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    start = config.warmup
    if config.rate is None:
        slots = split_evenly(config.concurrency or 1, workers)
        if min(slots) < 1:
            raise ConfigError(f"closed loop with concurrency {config.concurrency or 1} cannot feed "
                              f"{workers} workers: each needs at least one slot")
        # disjoint strided index sets, no end: a worker's stagger ramp sends more than its
        # measured requests (-n: in proportion to its slots), as many as it takes
        counts = (split_proportionally(config.num_requests, slots) if config.num_requests
                  else [None] * workers)
        return [Share(i, range(start + i, start + DURATION_INDEX_SPAN, workers), None, c, n)
                for i, (c, n) in enumerate(zip(slots, counts))]
    count = config.num_requests or (pool_size - start)
    offsets = arrival_offsets_ns(config.rate, count, burstiness=config.burstiness,
                                 seed=config.seed)
    owner = np.random.default_rng([config.seed, 1]).integers(0, workers, size=count)
    caps: list[int | None] = [None] * workers
    if config.concurrency:
        slots = split_evenly(config.concurrency, workers)
        caps = list(slots)
        if min(slots) < 1:
            raise ConfigError(f"a cap of {config.concurrency} in flight cannot be split over "
                              f"{workers} workers")
    shares = []
    for i in range(workers):
        mine = np.flatnonzero(owner == i)
        shares.append(Share(i, (mine + start).tolist(), offsets[mine].tolist(), caps[i]))
    return shares

