"""Should ``diagnose`` propose the gateway? A pure rule over measured evidence.

The gateway helps when two things hold at the load the server runs at:

1. queueing is a large share of TTFT (``queue_share``: the server's queue time over client TTFT,
   at the knee, from latscope's decomposition). Reordering a queue only helps if there is one;
   default threshold 0.5 ("queueing dominates");
2. request sizes differ widely. Under FCFS a short request waits behind whatever arrived before
   it; in an M/G/1 queue the mean FCFS wait grows with E[S^2] = E[S]^2 (1 + CV^2)
   (Pollaczek-Khinchine), and shortest-first removes most of the CV^2 part, so the gain grows
   with the size spread. ``sizes`` are per-request costs (prompt + output tokens); the rule asks
   for a coefficient of variation of at least 1 (as spread as an exponential), which a 90/10 mix
   of 192- and 2304-token requests has (CV 1.6) and a uniform 64..256 one (CV 0.3) has not.

The answer is a hypothesis: ``diagnose`` proves it with the A/B of ``benchmarks/gateway.py``.

How long that A/B's runs must be (``gateway_run_shape``): sjf holds a long request back for up to
its *aging horizon*, ``aging_factor * cost / served tokens per second``. A closed-loop run not much
longer than that ends with the held-back long requests still waiting, finished in the drain after
the last send, and the short requests' gain is partly borrowed from the run's end. On the local
CPU vLLM (2 slots, 90/10 mix, c=16, horizon ~7 s) short TTFT mean changed -47% with 64 requests
a run (~2 horizons), -29% with 160 (~5) and -33% with 320 (~11): runs measure five horizons at
least, after a warm-up of one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from latscope.errors import ConfigError
from latscope.gateway.queue import DEFAULT_AGING_FACTOR

QUEUE_SHARE_MIN = 0.5
SIZE_CV_MIN = 1.0
HORIZONS_MEASURED = 5  # aging horizons each A/B run measures (module docstring)
HORIZONS_WARMUP = 1  # and warms up for


@dataclass(frozen=True)
class GatewayFit:
    propose: bool
    reason: str
    evidence: dict[str, float] = field(default_factory=dict)


def size_spread(sizes: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(sizes, dtype=float)
    mean = float(arr.mean())
    return {"size_cv": float(arr.std() / mean) if mean > 0 else 0.0,
            "size_p50": float(np.percentile(arr, 50)), "size_p90": float(np.percentile(arr, 90)),
            "size_max": float(arr.max()), "requests": float(arr.size)}


def gateway_fits(queue_share: float, sizes: Sequence[float], *,
                 queue_share_min: float = QUEUE_SHARE_MIN,
                 size_cv_min: float = SIZE_CV_MIN) -> GatewayFit:
    """Whether to propose the gateway, and why, from the queue share of TTFT at the knee (0..1)
    and the workload's per-request sizes (tokens, >= 2 of them)."""
    if not 0.0 <= queue_share <= 1.0:
        raise ConfigError(f"queue share of TTFT must be within 0..1 (got {queue_share:g})")
    if len(sizes) < 2 or any(s < 0 for s in sizes):
        raise ConfigError("need at least 2 request sizes, none negative")
    evidence = {"queue_share": queue_share, **size_spread(sizes)}
    cv = evidence["size_cv"]
    queue_text = f"queueing is {queue_share:.0%} of TTFT at the knee"
    size_text = f"request sizes have CV {cv:.2f} (p50 {evidence['size_p50']:.0f}, " \
                f"p90 {evidence['size_p90']:.0f}, max {evidence['size_max']:.0f} tokens)"
    if queue_share < queue_share_min:
        return GatewayFit(False, f"{queue_text} (< {queue_share_min:.0%}): reordering the queue "
                                 "has little to gain", evidence)
    if cv < size_cv_min:
        return GatewayFit(False, f"{queue_text}, but {size_text} (< {size_cv_min:g}): "
                                 "shortest-first cannot reorder much; raise capacity instead",
                          evidence)
    return GatewayFit(True, f"{queue_text} and {size_text}: short requests wait behind long "
                            "ones; a gateway that serves short first should cut their TTFT",
                      evidence)


@dataclass(frozen=True)
class RunShape:
    """Requests per A/B run (measured, then warm-up before them) and the aging horizon they are
    counted from, in seconds and in requests served meanwhile at the measured rate."""

    requests: int
    warmup: int
    horizon_s: float
    horizon_requests: float

    def describe(self) -> str:
        return (f"runs of {self.warmup} warm-up + {self.requests} requests: sjf may hold a long "
                f"request back while ~{self.horizon_requests:.0f} others are served "
                f"({self.horizon_s:.1f} s at the sweep's rate), and shorter runs overstate "
                "its gain")


def aging_horizon_s(cost_tokens: float, served_tokens_per_s: float,
                    aging_factor: float = DEFAULT_AGING_FACTOR) -> float:
    """How long sjf may hold back a request of this cost: its deadline's distance from its
    arrival (``queue.Waiter.deadline``)."""
    if served_tokens_per_s <= 0:
        raise ConfigError("served tokens per second must be > 0")
    return aging_factor * cost_tokens / served_tokens_per_s


def gateway_run_shape(sizes: Sequence[float], requests_per_s: float, tokens_per_s: float,
                      *, min_requests: int, min_warmup: int,
                      aging_factor: float = DEFAULT_AGING_FACTOR) -> RunShape:
    """Requests per run for the gateway's A/B at a load measured at ``requests_per_s`` and
    ``tokens_per_s`` (prompt + output) with these request ``sizes``: ``HORIZONS_MEASURED`` aging
    horizons of the 95th-percentile request measured after ``HORIZONS_WARMUP`` of warm-up, and
    never fewer than ``min_requests`` / ``min_warmup``."""
    if len(sizes) == 0 or requests_per_s <= 0:
        raise ConfigError("need request sizes and a throughput > 0")
    horizon = aging_horizon_s(float(np.percentile(np.asarray(sizes, dtype=float), 95)),
                              tokens_per_s, aging_factor)
    per_horizon = requests_per_s * horizon
    return RunShape(requests=max(min_requests, math.ceil(HORIZONS_MEASURED * per_horizon)),
                    warmup=max(min_warmup, math.ceil(HORIZONS_WARMUP * per_horizon)),
                    horizon_s=horizon, horizon_requests=per_horizon)
