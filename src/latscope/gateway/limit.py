"""The in-flight limit: fixed, or adapted by AIMD to keep upstream queueing near zero.

``--max-inflight auto`` runs an additive-increase / multiplicative-decrease loop (TCP's
congestion control, and Netflix's concurrency-limits ``AIMDLimit``) once per ``interval_s``:

- congested, when the median upstream TTFT of the requests that got their first token during the
  last interval is above the target, or when the upstream's own waiting gauge
  (``vllm:num_requests_waiting``) was above zero at the last scrape: the limit is multiplied by
  ``backoff`` (default 0.8), at most once per interval;
- not congested and the limit was in use (requests waited in the gateway, or every slot was busy):
  the limit grows by ``max(1, 10%)`` of itself;
- otherwise it stays. It always stays within ``[min_limit, max_limit]``.

The median, not the mean or p99, is the signal: in a mix where most requests are short it follows
the short requests, whose TTFT is queueing plus a little prefill, and a few long prefills do not
make the loop back off. The loop is pure (``update`` takes the observations and returns the new
limit) so it is tested without a server.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass
class Observation:
    """What one control interval saw."""

    ttft_s: list[float] = field(default_factory=list)  # upstream TTFTs that ended in it
    upstream_waiting: float | None = None  # last scraped waiting gauge; None: not scraped
    queued: int = 0  # requests waiting in the gateway at the tick
    peak_inflight: int = 0  # most requests in flight upstream during the interval


@dataclass
class AimdLimit:
    ttft_target_s: float = 0.5
    initial: int = 8
    min_limit: int = 1
    max_limit: int = 1024
    backoff: float = 0.8
    growth: float = 0.1
    interval_s: float = 0.5
    value: int = 0
    last_reason: str = "start"

    def __post_init__(self) -> None:
        if not 1 <= self.min_limit <= self.max_limit:
            raise ValueError("need 1 <= min limit <= max limit")
        if not 0 < self.backoff < 1:
            raise ValueError("backoff must be within (0, 1)")
        if self.ttft_target_s <= 0:
            raise ValueError("TTFT target must be > 0")
        self.value = min(max(self.initial, self.min_limit), self.max_limit)

    def update(self, obs: Observation) -> int:
        ttft = statistics.median(obs.ttft_s) if obs.ttft_s else None
        if ttft is not None and ttft > self.ttft_target_s:
            self._set(math.floor(self.value * self.backoff),
                      f"median upstream TTFT {ttft * 1e3:.0f} ms > target")
        elif obs.upstream_waiting:
            self._set(math.floor(self.value * self.backoff),
                      f"upstream waiting {obs.upstream_waiting:g}")
        elif obs.queued or obs.peak_inflight >= self.value:
            self._set(self.value + max(1, round(self.value * self.growth)), "room: growing")
        else:
            self.last_reason = "steady"
        return self.value

    def _set(self, value: int, reason: str) -> None:
        self.value = min(max(value, self.min_limit), self.max_limit)
        self.last_reason = reason


@dataclass
class FixedLimit:
    value: int
    last_reason: str = "fixed"
    interval_s: float = 0.0  # 0: no control loop

    def __post_init__(self) -> None:
        if self.value < 1:
            raise ValueError("max in-flight must be >= 1")

    def update(self, obs: Observation) -> int:
        return self.value
