"""A load run's steady window: the completions between its first measured send and its last send,
over that window (``SteadyWindow``, kept by ``latscope.stats.RunStats``)."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from latscope.model import RequestRecord


class SteadyWindow:
    """A step's steady throughput: completions that ended between the first measured send and
    the last send (latency origins), over that window, so the drain after the last send (fewer
    requests in flight, e.g. 14.4 -> 10.8 req/s on a --max-num-seqs 16 server) is not counted.

    Warm-up completions that end inside the window count too: in a closed loop whose warm-up
    flows into the measured requests, every send in the window follows a completion, so the
    window's completion rate equals its send rate; counting only measured ones would miss the
    ``concurrency - 1`` warm-up requests that end in it. Memory stays bounded: measured
    completions are summed as soon as they end before the latest send seen, and a heap keeps
    only those that ended after it (about what is in flight); warm-up ends are kept (there are
    only ``warmup`` of them).
    """

    MIN_COMPLETIONS = 2  # fewer in the window: no steady state to speak of

    def __init__(self) -> None:
        self.first = self.last = None  # type: int | None
        self.settled = [0, 0, 0]  # completions, output tokens, input tokens
        self.pending: list[tuple[int, int, int]] = []  # heap of (end, out, in) after ``last``
        self.warm: list[tuple[int, int, int]] = []

    @staticmethod
    def _entry(r: RequestRecord) -> tuple[int, int, int] | None:
        if not r.ok or r.end_ns is None:
            return None
        return r.end_ns, r.output_tokens or 0, r.prompt_tokens or 0

    def add_warmup(self, r: RequestRecord) -> None:
        if (entry := self._entry(r)) is not None:
            self.warm.append(entry)

    def add_measured(self, r: RequestRecord, origin: int) -> None:
        # (_entry and _settle written out: once per record at the client's ceiling)
        last = self.last
        if self.first is None or origin < self.first:
            self.first = origin
        if last is None or origin > last:
            self.last = last = origin
            pending = self.pending
            while pending and pending[0][0] <= origin:
                self._settle(heapq.heappop(pending))
        end = r.end_ns
        if end is None or r.error_kind is not None:  # not r.ok
            return
        if end <= last:
            settled = self.settled
            settled[0] += 1
            settled[1] += r.output_tokens or 0
            settled[2] += r.prompt_tokens or 0
        else:
            heapq.heappush(self.pending, (end, r.output_tokens or 0, r.prompt_tokens or 0))

    def add_measured_batch(self, origins: np.ndarray, ends: np.ndarray, outs: np.ndarray,
                           ins: np.ndarray) -> None:
        """Usual records (measured, ended well) at once, as ``add_measured`` of each in turn
        leaves the window: a completion is settled once it ended before the latest send, and
        which record brought that send does not matter (``merge`` relies on the same)."""
        lo, hi = int(origins.min()), int(origins.max())
        if self.first is None or lo < self.first:
            self.first = lo
        if self.last is None or hi > self.last:
            self.last = hi
            pending = self.pending
            while pending and pending[0][0] <= hi:
                self._settle(heapq.heappop(pending))
        now = ends <= self.last
        settled = self.settled
        settled[0] += int(np.count_nonzero(now))
        settled[1] += int(outs[now].sum())
        settled[2] += int(ins[now].sum())
        if not now.all():
            later = ~now
            for entry in zip(ends[later].tolist(), outs[later].tolist(), ins[later].tolist()):
                heapq.heappush(self.pending, entry)

    def merge(self, other: SteadyWindow, shift_ns: int = 0) -> None:
        """Another window's completions, its times moved ``shift_ns`` earlier. A completion
        settles once it ended before the latest send seen, whichever record brought that send:
        the ones the other had settled ended before its latest, so before the merged one; its
        pending ones (and these) settle against the merged latest."""
        if other.first is not None:
            first = other.first - shift_ns
            self.first = first if self.first is None else min(self.first, first)
        self.settled = [a + b for a, b in zip(self.settled, other.settled)]
        self.warm += [(end - shift_ns, out, inp) for end, out, inp in other.warm]
        for end, out, inp in other.pending:
            heapq.heappush(self.pending, (end - shift_ns, out, inp))
        if other.last is not None:
            last = other.last - shift_ns
            self.last = last if self.last is None else max(self.last, last)
        while self.pending and self.last is not None and self.pending[0][0] <= self.last:
            self._settle(heapq.heappop(self.pending))

    def _settle(self, entry: tuple[int, int, int]) -> None:
        self.settled[0] += 1
        self.settled[1] += entry[1]
        self.settled[2] += entry[2]

    def throughput(self) -> dict[str, Any] | None:
        if self.first is None or self.last is None or self.last <= self.first:
            return None
        done, out, inp = self.settled  # every settled end lies in [first, last]: it is measured
        for end, o, i in self.warm:
            if self.first <= end <= self.last:
                done, out, inp = done + 1, out + o, inp + i
        if done < self.MIN_COMPLETIONS:
            return None
        window = (self.last - self.first) / 1e9
        return {"requests_per_s": done / window, "output_tokens_per_s": out / window,
                "total_tokens_per_s": (out + inp) / window, "window_s": window,
                "window": "steady: first measured send to last send", "window_requests": done}
