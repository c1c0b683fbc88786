"""Admission: forward now while in-flight requests are under the limit, else wait in the queue.

``try_now`` takes a slot at once when one is free and nobody waits (the light-load path costs
no tokenization and no queue work); else ``wait`` queues the request at an estimated cost,
refines it (the upstream's ``/tokenize``) while it waits, and returns when ``release``/
``dispatch`` hand it a slot. A waiter whose client leaves (its task is cancelled)
is taken out of the queue, or gives its slot back when it had just been handed one.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from latscope.gateway.limit import AimdLimit, FixedLimit, Observation
from latscope.gateway.metrics import GatewayMetrics
from latscope.gateway.queue import Waiter, WaitQueue


class QueueFull(Exception):
    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"gateway queue is full; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class Admission:
    def __init__(self, queue: WaitQueue, limit: AimdLimit | FixedLimit, max_queue: int,
                 metrics: GatewayMetrics) -> None:
        self.queue, self.limit, self.max_queue, self.metrics = queue, limit, max_queue, metrics
        self.inflight = 0
        self.peak_inflight = 0
        self.ttft_s: list[float] = []  # upstream TTFTs since the last control tick
        self.upstream_waiting: float | None = None
        self.upstream_running: float | None = None
        metrics.limit.set(limit.value)

    def try_now(self) -> bool:
        """Take a slot without waiting, if one is free and nobody is queued."""
        if self.inflight < self.limit.value and not self.queue:
            self._take()
            return True
        return False

    async def wait(self, cost_of: Callable[[], Awaitable[float]], estimate: float = 0.0
                   ) -> float:
        """Queue until a slot is handed over; returns the predicted cost used for ordering.

        The waiter is queued at its arrival with ``estimate`` (no I/O): while a ``/tokenize``
        round trip was outstanding, a request was in no queue, and one that came later could
        take the slot freed meanwhile (seen in CI). ``cost_of`` refines the cost beside the
        wait, and a slot handed over first is used at once: awaiting the count first held the
        slot idle for a round trip to the upstream's API server, the very process that is busy
        when requests queue.
        """
        if len(self.queue) >= self.max_queue:
            raise QueueFull(self.retry_after_s())
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = self.queue.push(Waiter(estimate, time.monotonic(), future))
        self.metrics.queue_length.set(len(self.queue))
        self.dispatch()  # a slot may be free (the queue was not empty when try_now looked)
        refining = None if future.done() else asyncio.ensure_future(_refine(waiter, cost_of))
        try:
            await future
        except asyncio.CancelledError:
            if not self.queue.remove(waiter) and future.done() and not future.cancelled():
                self.release(0.0)  # handed a slot just as the client left: give it back
            self.metrics.queue_length.set(len(self.queue))
            raise
        finally:
            if refining is not None:
                refining.cancel()
        self.metrics.queue_wait.observe(time.monotonic() - waiter.arrival_s)
        return waiter.cost

    def release(self, cost: float) -> None:
        self.inflight -= 1
        self.metrics.inflight.set(self.inflight)
        if cost:
            rate = self.queue.rate
            if not isinstance(rate, (int, float)):
                rate.add(time.monotonic(), cost)
        self.dispatch()

    def dispatch(self) -> None:
        now = time.monotonic()
        while self.queue and self.inflight < self.limit.value:
            waiter = self.queue.pop(now)
            if waiter.payload.done():  # cancelled meanwhile
                continue
            self._take()
            waiter.payload.set_result(None)
        self.metrics.queue_length.set(len(self.queue))

    def observe_ttft(self, ttft_s: float) -> None:
        self.ttft_s.append(ttft_s)
        self.metrics.upstream_ttft.observe(ttft_s)

    def tick(self) -> int:
        """One step of the control loop; returns the new limit."""
        obs = Observation(ttft_s=self.ttft_s, upstream_waiting=self.upstream_waiting,
                          upstream_running=self.upstream_running, queued=len(self.queue),
                          inflight=self.inflight, peak_inflight=self.peak_inflight)
        self.ttft_s, self.peak_inflight = [], self.inflight
        value = self.limit.update(obs)
        self.metrics.limit.set(value)
        self.dispatch()
        return value

    def retry_after_s(self) -> int:
        """Seconds the upstream needs to serve what waits now, at its served rate (at least 1 s:
        ``Retry-After`` takes whole seconds)."""
        served = self.queue.current_rate(time.monotonic())
        return max(1, math.ceil(self.queue.total_cost() / served))

    def _take(self) -> None:
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)
        self.metrics.inflight.set(self.inflight)
        self.metrics.admitted.inc()


async def _refine(waiter: Waiter, cost_of: Callable[[], Awaitable[float]]) -> None:
    """The exact cost in place of the estimate, if it comes before the waiter's turn (the
    proxy's ``cost_of`` falls back to the estimate itself when the upstream cannot count)."""
    waiter.cost = await cost_of()
