"""When each request is meant to be sent: the arrival process of an open-loop run.

Inter-arrival gaps are drawn from a gamma distribution with shape ``burstiness`` and mean
``1/rate`` (shape 1 is a Poisson process; below 1 burstier, above 1 more regular), the same model
as vllm bench serve's ``--burstiness``. Offsets are precomputed from the seed so that a run is
reproducible and no random numbers are drawn while measuring. A closed loop has no schedule: a
request is scheduled the moment one of ``concurrency`` slots frees up.
"""

from __future__ import annotations

import numpy as np


def arrival_offsets_ns(rate: float, count: int, *, burstiness: float = 1.0,
                       seed: int = 0) -> np.ndarray:
    """Offsets (ns from the run's start) of ``count`` arrivals; the first one is at 0."""
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=count)
    gaps[0] = 0.0
    return np.rint(np.cumsum(gaps) * 1e9).astype(np.int64)
