"""A load run's steady window: the completions between its first measured send and its last send,
over that window, and how many requests were in flight in it on average (``SteadyWindow``,
kept by ``latscope.stats.RunStats``)."""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from latscope.model import RequestRecord

# A request that ended: (end, output tokens, input tokens, sent, 1 if it completed else 0)
Ended = tuple[int, int, int, int, int]


class SteadyWindow:
    """A step's steady throughput: completions that ended between the first measured send and
    the last send (latency origins), over that window, so the drain after the last send (fewer
    requests in flight, e.g. 14.4 -> 10.8 req/s on a --max-num-seqs 16 server) is not counted.

    Warm-up completions that end inside the window count too: in a closed loop whose warm-up
    flows into the measured requests, every send in the window follows a completion, so the
    window's completion rate equals its send rate; counting only measured ones would miss the
    ``concurrency - 1`` warm-up requests that end in it.

    The mean in flight over the window is every request's time in flight inside it (from its
    send to its end, failures and warm-ups included) over the window's length: what a closed
    loop's ``-c N`` held, beside the N asked (issue #52: a stagger ramp counted in the window
    held 54 of 64 on average).

    Memory stays bounded: measured requests are summed as soon as they end before the latest
    send seen, and a heap keeps only those that ended after it (about what is in flight);
    warm-up ends are kept (there are only ``warmup`` of them, and a closed loop's ramp).
    """

    MIN_COMPLETIONS = 2  # fewer in the window: no steady state to speak of

    def __init__(self) -> None:
        self.first = self.last = None  # type: int | None
        # completions, output tokens, input tokens, ns in flight (of requests ended by ``last``)
        self.settled = [0, 0, 0, 0]
        self.pending: list[Ended] = []  # heap of requests that ended after ``last``
        self.warm: list[Ended] = []

    def add_warmup(self, r: RequestRecord) -> None:
        if r.end_ns is not None:
            self.warm.append((r.end_ns, r.output_tokens or 0, r.prompt_tokens or 0,
                              r.sent_ns or r.scheduled_ns, int(r.ok)))

    def add_measured(self, r: RequestRecord, origin: int) -> None:
        # (_settle written out: once per record at the client's ceiling)
        last = self.last
        if self.first is None or origin < self.first:
            self.first = origin
        if last is None or origin > last:
            self.last = last = origin
            pending = self.pending
            while pending and pending[0][0] <= origin:
                self._settle(heapq.heappop(pending))
        end = r.end_ns
        if end is None:  # never sent, or cancelled in flight
            return
        done = int(r.error_kind is None)  # r.ok
        sent = r.sent_ns or origin
        if end <= last:
            settled = self.settled
            settled[0] += done
            if done:
                settled[1] += r.output_tokens or 0
                settled[2] += r.prompt_tokens or 0
            settled[3] += end - sent
        else:
            heapq.heappush(self.pending, (end, r.output_tokens or 0, r.prompt_tokens or 0,
                                          sent, done))

    def add_measured_batch(self, origins: np.ndarray, sents: np.ndarray, ends: np.ndarray,
                           outs: np.ndarray, ins: np.ndarray) -> None:
        """Usual records (measured, ended well) at once, as ``add_measured`` of each in turn
        leaves the window: a request is settled once it ended before the latest send, and
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
        settled[3] += int((ends[now] - sents[now]).sum())
        if not now.all():
            later = ~now
            for end, out, inp, sent in zip(ends[later].tolist(), outs[later].tolist(),
                                           ins[later].tolist(), sents[later].tolist()):
                heapq.heappush(self.pending, (end, out, inp, sent, 1))

    def merge(self, other: SteadyWindow, shift_ns: int = 0) -> None:
        """Another window's requests, its times moved ``shift_ns`` earlier. A request settles
        once it ended before the latest send seen, whichever record brought that send: the
        ones the other had settled ended before its latest, so before the merged one; its
        pending ones (and these) settle against the merged latest."""
        if other.first is not None:
            first = other.first - shift_ns
            self.first = first if self.first is None else min(self.first, first)
        self.settled = [a + b for a, b in zip(self.settled, other.settled)]
        self.warm += [(end - shift_ns, out, inp, sent - shift_ns, done)
                      for end, out, inp, sent, done in other.warm]
        for end, out, inp, sent, done in other.pending:
            heapq.heappush(self.pending, (end - shift_ns, out, inp, sent - shift_ns, done))
        if other.last is not None:
            last = other.last - shift_ns
            self.last = last if self.last is None else max(self.last, last)
        while self.pending and self.last is not None and self.pending[0][0] <= self.last:
            self._settle(heapq.heappop(self.pending))

    def _settle(self, entry: Ended) -> None:
        end, out, inp, sent, done = entry
        settled = self.settled
        settled[0] += done
        if done:
            settled[1] += out
            settled[2] += inp
        settled[3] += end - sent

    def mean_in_flight(self) -> float | None:
        """Requests in flight over the window, on average: each one's time from its send to
        its end inside [first, last], summed, over the window's length."""
        if self.first is None or self.last is None or self.last <= self.first:
            return None
        first, last = self.first, self.last
        busy = self.settled[3] + sum(max(0, last - sent) for _, _, _, sent, _ in self.pending)
        busy += sum(max(0, min(end, last) - max(sent, first)) for end, _, _, sent, _ in self.warm)
        return busy / (last - first)

    def throughput(self) -> dict[str, Any] | None:
        if self.first is None or self.last is None or self.last <= self.first:
            return None
        done, out, inp = self.settled[:3]  # every settled end lies in [first, last]: measured
        for end, o, i, _, ok in self.warm:
            if ok and self.first <= end <= self.last:
                done, out, inp = done + 1, out + o, inp + i
        if done < self.MIN_COMPLETIONS:
            return None
        window = (self.last - self.first) / 1e9
        return {"requests_per_s": done / window, "output_tokens_per_s": out / window,
                "total_tokens_per_s": (out + inp) / window, "window_s": window,
                "window": "steady: first measured send to last send", "window_requests": done,
                "mean_in_flight": self.mean_in_flight()}
