"""The in-flight limit: fixed, or adapted by AIMD to keep upstream queueing near zero.

``--max-inflight auto`` runs an additive-increase / multiplicative-decrease loop (TCP's
congestion control, and Netflix's concurrency-limits ``AIMDLimit``) once per ``interval_s``:

- upstream queueing: the upstream's own waiting gauge (``vllm:num_requests_waiting``) was above
  the headroom at two scrapes in a row (one is often a request caught between arrival and its
  first step). The limit drops to what the upstream really took of the gateway's requests (in
  flight minus waiting; the running gauge alone dips whenever a scrape falls between one request
  ending and the next starting) plus the headroom, or by ``backoff`` (0.8) when that is unknown.
  The headroom (a quarter of what it takes, at least 1) keeps a request or two waiting *inside*
  the upstream: measured on the local vLLM with 4 sequences a batch, a limit held at exactly its
  batch size left a slot idle after every finished request for the hops from vLLM's last chunk
  back through the gateway to the next request's first step, and cost up to half the throughput.
  This acts only while the gateway has requests upstream: other clients' queue alone leaves the
  limit as it is (else it decays to 1 while an A/B's direct runs fill the server, and the next
  gateway run starts from there; on an H200, diagnose's gateway runs had 3x direct's TTFT);
- too slow, when a TTFT target is set: the median upstream TTFT of the requests that got their
  first token during the interval was above it: the limit is multiplied by ``backoff``;
- not congested and the limit was in use (requests waited in the gateway, or every slot was busy):
  the limit doubles until the upstream has queued once (TCP's slow start), then grows by
  ``max(1, 10%)`` of itself. Growing by a tenth from the start was too slow for a GPU server:
  against an H200 whose vLLM held ~450 requests at that load, a tenth every 0.5 s needs 21 s to
  climb from 8 to 450; the A/B's 20 s runs ended with the limit at 422 and 461, the gateway's
  queue grew all along, and short TTFT was 11x direct's;
- otherwise it stays. It always stays within ``[min_limit, max_limit]``.

The TTFT target is off unless given: on the local vLLM (256 sequences a batch, chunked prefill)
a 500 ms target held the limit near 7 and cut throughput by a quarter, because a vLLM that takes
everything in shares its steps between all requests and a lower limit only moves the wait into
the gateway (benchmarks/gateway.py, docs/gateway.md). The median, not the mean or p99, is the
signal: in a mix where most requests are short it follows
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
    upstream_running: float | None = None  # last scraped running gauge (reported, not used)
    queued: int = 0  # requests waiting in the gateway at the tick
    inflight: int = 0  # requests forwarded by the gateway at the scrape
    peak_inflight: int = 0  # most requests in flight upstream during the interval


@dataclass
class AimdLimit:
    ttft_target_s: float | None = None
    initial: int = 8
    min_limit: int = 1
    max_limit: int = 4096  # above vLLM's largest default batch (1024 sequences) plus headroom
    backoff: float = 0.8
    growth: float = 0.1
    interval_s: float = 0.5
    headroom: float = 0.25  # requests left waiting upstream, as a share of what it takes
    value: int = 0
    last_reason: str = "start"
    _waited_before: bool = False
    _slow_start: bool = True  # doubling until the first sign of congestion

    def __post_init__(self) -> None:
        if not 1 <= self.min_limit <= self.max_limit:
            raise ValueError("need 1 <= min limit <= max limit")
        if not 0 < self.backoff < 1:
            raise ValueError("backoff must be within (0, 1)")
        if self.ttft_target_s is not None and self.ttft_target_s <= 0:
            raise ValueError("TTFT target must be > 0")
        self.value = min(max(self.initial, self.min_limit), self.max_limit)

    def update(self, obs: Observation) -> int:
        ttft = statistics.median(obs.ttft_s) if obs.ttft_s else None
        waiting = math.ceil(obs.upstream_waiting or 0)
        taken = obs.inflight - waiting
        headroom = max(1, round(taken * self.headroom))
        # others' queue while none of ours is upstream says nothing of our limit: cutting on it
        # took the limit to 1 while diagnose's A runs went straight to the server
        over = waiting > headroom and max(obs.inflight, obs.peak_inflight) >= 1
        queued_upstream, self._waited_before = over and self._waited_before, over
        if queued_upstream:
            self._set(min(taken + headroom, self.value) if taken >= 1
                      else math.floor(self.value * self.backoff),
                      f"upstream waiting {waiting} > headroom {headroom}")
        elif self.ttft_target_s is not None and ttft is not None and ttft > self.ttft_target_s:
            self._set(math.floor(self.value * self.backoff),
                      f"median upstream TTFT {ttft * 1e3:.0f} ms > target")
        elif over:
            self.last_reason = "upstream waiting once: watching"
        elif (obs.queued or obs.peak_inflight >= self.value) and self._slow_start:
            self._set(self.value * 2, "room, no congestion seen yet: doubling")
        elif obs.queued or obs.peak_inflight >= self.value:
            self._set(self.value + max(1, round(self.value * self.growth)), "room: growing")
        else:
            self.last_reason = "steady"
        return self.value

    def _set(self, value: int, reason: str) -> None:
        if value < self.value:
            self._slow_start = False
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
