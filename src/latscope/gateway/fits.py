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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from latscope.errors import ConfigError

QUEUE_SHARE_MIN = 0.5
SIZE_CV_MIN = 1.0


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
