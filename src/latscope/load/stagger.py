"""When each slot of a closed loop sends its first request (``Stagger``), and which of a closed
loop's sends are measured (``Feed``): not those of the stagger's ramp."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterable


class Stagger:
    """When each slot of a closed loop sends its first request: never all at once.

    Started together, ``c`` slots of equal-sized requests stay in lockstep: every wave is
    sent within a few ms (on an H200 at c=8, each request left within 2 ms of 6.5 of the other
    7, median), is prefilled together, and TTFT reads the wave's size, not the load. So slot 0
    sends first, alone; its request's time T (send to end) paces the others: slot i sends i/c
    of T after it ended, spreading the slots evenly over one request. T is capped at
    ``max_spread_ns`` (1 s, or a tenth of a --duration), and a slot whose turn comes before the
    pilot ended (a slow first request, a stalled server) goes at i/c of that cap. A later loop
    of the same run reuses the T measured first and needs no pilot.

    Until the last slot has sent its first request the loop holds fewer than ``c`` requests in
    flight (slot 0 alone for a whole request, then one more every T/c): that ramp is not the
    load asked for, so its sends are warm-up requests (``Feed``), and the statistics start at
    the send that makes the c-th request in flight (``held_ns``). Counted in them, it made a
    closed loop at -c 64 hold 54 in flight on average and read 15-20% less throughput than a
    client that starts all its slots at once (issue #52). The warm-up requests absorb it when
    there are enough of them.
    """

    MAX_SPREAD_NS = 1_000_000_000

    def __init__(self, slots: int, request_ns: int | None, window_ns: int | None,
                 offset: float = 0.0) -> None:
        """``window_ns``: how long the loop may send (a --duration), which caps the spread."""
        self.slots, self.request_ns = slots, request_ns
        # another process's slots interleave with these: worker w of W shifts its own by w/W
        self.offset = offset
        self.basis = "an earlier loop's first request" if request_ns is not None else "pilot"
        self.start_ns = time.perf_counter_ns()
        self.max_spread_ns = self.MAX_SPREAD_NS
        if window_ns is not None:
            self.max_spread_ns = min(self.max_spread_ns, window_ns // 10)
        self.released = asyncio.Event()
        self.gave_up = 0  # slots that went before the pilot ended
        self.loop_start_ns = self.start_ns
        self.started = 0  # slots that have sent (or are about to send) their first request
        self.held_ns: int | None = None  # when the last one did: c requests in flight
        self.ramp_requests = 0  # sends before then: warm-up requests (``Feed``)
        if request_ns is not None or (slots < 2 and not offset):
            self.released.set()

    def slot_starts(self) -> None:
        """A slot is about to send its first request; the last one to do so makes the loop
        hold the concurrency asked."""
        self.started += 1
        if self.started == self.slots:
            self.held_ns = time.perf_counter_ns()

    def pilot_ended(self, took_ns: int | None) -> None:
        if self.released.is_set():
            return
        self.request_ns = took_ns
        self.start_ns = time.perf_counter_ns()
        self.released.set()

    def spread_ns(self) -> int:
        return max(min(self.request_ns or 0, self.max_spread_ns), 0)

    async def wait(self, slot: int) -> None:
        """Before a slot's first send; slot 0 of a loop with a pilot comes back here after its
        first request (``after_pilot``) when it has an offset to keep."""
        if slot == 0 and (self.request_ns is None or not self.offset):
            return  # the pilot itself, or no offset to keep
        await self._turn(slot + self.offset)

    async def after_pilot(self) -> None:
        if self.offset and self.basis == "pilot":
            await self._turn(self.offset)

    async def _turn(self, position: float) -> None:
        if not self.released.is_set():
            give_up = self.start_ns + int(self.max_spread_ns * position / self.slots)
            try:
                await asyncio.wait_for(self.released.wait(),
                                       max(give_up - time.perf_counter_ns(), 0) / 1e9)
            except asyncio.TimeoutError:
                self.gave_up += 1
                return
        delay = (self.start_ns + int(self.spread_ns() * position / self.slots)
                 - time.perf_counter_ns())
        if delay > 0:
            await asyncio.sleep(delay / 1e9)

    def describe(self, warmup: bool) -> dict[str, Any]:
        one = self.slots < 2 and not self.offset
        return {"phase": "warm-up" if warmup else "measured", "slots": self.slots,
                "rule": "one slot: no stagger" if one else
                        "slot i sends first i/slots of one request time (at most "
                        f"{self.max_spread_ns / 1e9:g} s) after slot 0's first request",
                "request_time_ms": None if self.request_ns is None else self.request_ns / 1e6,
                "request_time_from": None if one else self.basis,
                "spacing_ms": 0.0 if one else self.spread_ns() / self.slots / 1e6,
                "offset_slots": self.offset, "slots_not_waiting_for_pilot": self.gave_up,
                # the ramp: sends before every slot had sent, warm-up requests (``Feed``)
                "held_after_ms": None if self.held_ns is None
                else (self.held_ns - self.loop_start_ns) / 1e6,
                "ramp_requests": self.ramp_requests}


class Feed:
    """The indices a closed loop's slots send, each with whether it is a warm-up request:
    below ``warm_below`` (the run's warm-up), or sent before the loop held its concurrency
    (``Stagger``'s ramp: ``ramping``). ``measured`` measured sends at most (None: until the
    indices or the time run out): a ramp's sends come on top of them, as a warm-up's do, so
    ``-n N`` measures N requests. The indices must not run out before (an -n run's are
    unbounded: ``itertools.count``, a worker's share a stride of them)."""

    def __init__(self, indices: Iterable[int], *, warm_below: int = 0, warmup: bool = False,
                 measured: int | None = None) -> None:
        self.indices = iter(indices)
        self.warm_below, self.warmup, self.left = warm_below, warmup, measured

    def take(self, ramping: bool) -> tuple[int, bool, bool] | None:
        """The next send: (index, warm-up, of the ramp); None when the loop is done."""
        if self.left == 0:
            return None
        index = next(self.indices, None)
        if index is None:
            return None
        warm = self.warmup or index < self.warm_below
        if not warm and ramping:
            return index, True, True
        if not warm and self.left is not None:
            self.left -= 1
        return index, warm, False
