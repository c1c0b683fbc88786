"""The gateway's wait queue: who goes next when an in-flight slot frees.

``fcfs`` serves in arrival order. ``sjf`` serves the earliest *deadline* first, where a request's
deadline is its arrival time plus ``aging_factor`` times its fair share of the upstream's time,
``cost / rate`` (``rate``: the cost units per second the upstream was measured to serve). A short
request therefore jumps ahead of long ones that arrived shortly before it, but a request of cost C
is only ever overtaken by requests that arrived within ``aging_factor * C / rate`` seconds after
it: its wait beyond what FCFS would have given it is bounded by that window (at offered load
rho, about ``rho * aging_factor`` times its own fair share). With a fixed rate this is plain
earliest-deadline-first; with a measured rate the order is recomputed at each pick, so the queue
is a list scanned in O(n) (n is bounded by ``max_queue``; 1000 entries take ~0.1 ms).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

# tag: nothing is held below the limit; requests carry their deadline as vLLM's `priority`
# (tags.py), and those beyond the limit (overload) wait in sjf's order
POLICIES = ("fcfs", "sjf", "tag")
# how many fair shares of the upstream's time a request may be held back: measured in
# docs/gateway.md ("Aging factor"), no K meets both goals there
DEFAULT_AGING_FACTOR = 4.0


@dataclass(slots=True)
class Waiter:
    """One queued request: its predicted cost, when it arrived (s, monotonic) and a payload."""

    cost: float
    arrival_s: float
    payload: Any = None
    seq: int = 0  # arrival order, the tie-breaker

    def deadline(self, aging_factor: float, rate: float) -> float:
        return self.arrival_s + aging_factor * self.cost / rate


@dataclass
class ServedRate:
    """Cost units per second the upstream served, over a sliding window of finished requests.

    Before anything has finished (or after an idle spell longer than the window), ``initial``."""

    window_s: float = 30.0
    initial: float = 1000.0
    _done: deque[tuple[float, float]] = field(default_factory=deque)
    _total: float = 0.0

    def add(self, now_s: float, cost: float) -> None:
        self._done.append((now_s, cost))
        self._total += cost
        self._trim(now_s)

    def value(self, now_s: float) -> float:
        self._trim(now_s)
        if len(self._done) < 2:
            return self.initial
        span = max(now_s - self._done[0][0], 1e-3)
        return max(self._total / span, 1e-6)

    def _trim(self, now_s: float) -> None:
        while self._done and now_s - self._done[0][0] > self.window_s:
            self._total -= self._done.popleft()[1]


class WaitQueue:
    """Waiters ordered by ``policy``; ``rate`` is a fixed number or a ``ServedRate``."""

    def __init__(self, policy: str = "sjf", aging_factor: float = DEFAULT_AGING_FACTOR,
                 rate: float | ServedRate | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES} (got {policy!r})")
        if aging_factor <= 0:
            raise ValueError("aging factor must be > 0")
        self.policy, self.aging_factor = policy, aging_factor
        self.rate = rate if rate is not None else ServedRate()
        self._items: list[Waiter] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._items)

    def push(self, waiter: Waiter) -> Waiter:
        waiter.seq = next(self._seq)
        self._items.append(waiter)
        return waiter

    def remove(self, waiter: Waiter) -> bool:
        """Take out a waiter that gave up (its client left); False if it was already popped."""
        try:
            self._items.remove(waiter)
        except ValueError:
            return False
        return True

    def pop(self, now_s: float) -> Waiter:
        """The next waiter to serve (IndexError when empty)."""
        if not self._items:
            raise IndexError("pop from an empty wait queue")
        if self.policy == "fcfs":
            return self._items.pop(0)  # appended in arrival order
        rate = self.current_rate(now_s)
        best = min(range(len(self._items)),
                   key=lambda i: (self._items[i].deadline(self.aging_factor, rate),
                                  self._items[i].seq))
        return self._items.pop(best)

    def current_rate(self, now_s: float) -> float:
        rate = self.rate
        return rate.value(now_s) if isinstance(rate, ServedRate) else float(rate)

    def total_cost(self) -> float:
        return sum(w.cost for w in self._items)

    def longest_wait_s(self, now_s: float) -> float:
        return max((now_s - w.arrival_s for w in self._items), default=0.0)
