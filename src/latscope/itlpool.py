"""One run's ITL gaps, pooled over its requests: exact float32 values up to a cap, then a log
histogram, so that a run of any length holds a bounded store (``ItlPool``; ``RunStats`` keeps
one for the run and one per group)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from latscope import native, twins
from latscope.percentiles import distribution, pkey
from latscope.twins import Gaps

_NS_PER_MS = 1e6
# 256 KiB of float32 gaps (~500 requests of 128 tokens), then a histogram (~120 KiB): the ITL
# store stops growing there; at 1 << 22 it grew ~1 KB a request (255 gaps x 4 B) up to 16 MiB
ITL_EXACT_MAX = 1 << 16
_HIST_LO_MS, _HIST_STEP = 1e-4, 2e-3  # log bins: 0.1 us upwards, 0.2% wide (+-0.1% error)


class ItlPool:
    """One pooled metric (ITL): exact float32 values up to ``cap``, then a log histogram.

    Count, mean, std, min and max stay exact (running float64 sums); only percentiles of a
    folded metric carry the histogram's +-0.1% relative error, and the summary says so. Past
    the cap, gaps still wait in the store and are folded a cap-full at a time (numpy's
    per-call overhead paid once per 65k gaps, not once per request).
    """

    def __init__(self, cap: int, backend: str | None = None) -> None:
        """``backend``: "c" or "python" (``native.BACKENDS``; None: the one ``native`` chose)."""
        self.backend = backend or native.BACKEND
        self.store = native.BACKENDS[self.backend].GapStore(cap)
        self.hist: np.ndarray | None = None
        self.zeros = 0  # exact zero gaps (chunks of one read) in the histogram

    def add_times(self, times: list[int]) -> None:
        """The gaps between one request's token times (ns), ``itls_ms``'s values: in one C
        call (numpy's per-call overhead was ~9 us a request, a tenth of the client's whole
        cost per response at full speed; the C store's call and the Python around it ~2.8)."""
        if not self.store.add_times(times):  # full: fold what waits, then keep these
            self._fold_kept()
            if not self.store.add_times(times):  # one request past the whole cap
                self.extend(np.diff(np.asarray(times, dtype=np.int64)) / _NS_PER_MS)

    def add_gaps(self, gaps: Gaps) -> None:
        """One request's gaps (``twins.Gaps``: float32 values, float64 sum, sum of squares,
        min, max) read from its requests.jsonl line (``native.json_gaps``: records counted
        from the file)."""
        if not self.store.add_gaps(gaps):
            self._fold_kept()
            if not self.store.add_gaps(gaps):
                self._fold_past_cap(np.frombuffer(gaps[0], dtype=np.float32), gaps)

    def extend(self, gaps: np.ndarray) -> None:
        """Gaps (ms) given as an array: kept like a request's, folded where past the cap."""
        if not gaps.size:
            return
        sums = twins.gap_sums(gaps)
        if not self.store.add_gaps(sums):
            self._fold_kept()
            if not self.store.add_gaps(sums):
                self._fold_past_cap(gaps, sums)

    def merge(self, other: ItlPool) -> None:
        """Another run's gaps (a worker's share of this run): its histogram added, the values
        it still kept kept here (or folded), its sums added once."""
        if other.hist is not None:
            if self.hist is None:
                self.hist = np.zeros_like(other.hist)
            self.hist += other.hist
            self.zeros += other.zeros
        store = other.store
        self._take_in(store.values(), store.count, store.total, store.total_sq, store.lo,
                      store.hi)

    def _take_in(self, values: bytes, count: int, total: float, total_sq: float, lo: float,
                 hi: float) -> None:
        """``count`` gaps with these sums, of which ``values`` (float32) are the ones not
        folded yet: the values kept like a request's (counted by their number, no sums),
        then the rest of the count and every sum."""
        self.add_gaps((values, 0.0, 0.0, math.inf, -math.inf))
        self.store.add_sums(count - len(values) // 4, total, total_sq, lo, hi)

    def __getstate__(self) -> dict[str, Any]:
        """A worker's statistics go to the driver pickled; the C store as its values and sums."""
        store = self.store
        return {"cap": store.cap, "backend": self.backend,
                "hist": self.hist, "zeros": self.zeros,
                "gaps": (store.values(), store.count, store.total, store.total_sq, store.lo,
                         store.hi)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        backend = state.get("backend")
        self.__init__(state["cap"], backend if backend in native.BACKENDS else None)  # type: ignore[misc]
        self.hist, self.zeros = state["hist"], state["zeros"]
        self._take_in(*state["gaps"])

    def _fold_past_cap(self, gaps: np.ndarray, sums: Gaps) -> None:
        """One request's gaps, more than the store ever keeps: counted and folded at once."""
        self.store.add_sums(len(sums[0]) // 4, *sums[1:])
        self._fold(gaps.astype(np.float32).astype(np.float64))

    def _fold_kept(self) -> None:
        if self.store.kept:
            self._fold(np.frombuffer(self.store.values(), dtype=np.float32).astype(np.float64))
            self.store.clear()

    def _fold(self, gaps: np.ndarray) -> None:
        if self.hist is None:
            self.hist = np.zeros(_bin(np.float64(1e9)) + 2, dtype=np.int64)
        positive = gaps[gaps > 0]
        self.zeros += int(gaps.size - positive.size)
        np.add.at(self.hist, np.minimum(_bin(positive), self.hist.size - 1), 1)

    def nbytes(self) -> int:
        """Bytes of gap storage held (exact values or histogram): bounded whatever the count."""
        return int(self.store.nbytes) + (0 if self.hist is None else self.hist.nbytes)

    def distribution(self, percentiles: Sequence[float]) -> dict[str, Any]:
        if self.hist is None:
            return distribution(np.frombuffer(self.store.values(), dtype=np.float32),
                                percentiles)
        self._fold_kept()  # the gaps still waiting, so that every percentile counts them
        s = self.store
        mean = s.total / s.count
        out: dict[str, Any] = {"count": s.count, "mean": mean,
                               "std": math.sqrt(max(s.total_sq / s.count - mean * mean, 0.0)),
                               "min": s.lo, "max": s.hi}
        cum = np.cumsum(self.hist) + self.zeros
        for p in percentiles:
            rank = p / 100 * (s.count - 1)  # numpy's linear rank between two order statistics
            lo, hi = self._at(cum, math.floor(rank)), self._at(cum, math.ceil(rank))
            out[pkey(p)] = lo + (hi - lo) * (rank - math.floor(rank))
        out["percentile_rel_error"] = _HIST_STEP / 2
        return out

    def _at(self, cum: np.ndarray, k: int) -> float:
        """The k-th smallest value (0-based), to within half a bin: its bin's geometric middle."""
        if k < self.zeros:
            return 0.0
        b = int(np.searchsorted(cum, k, side="right"))
        mid = _HIST_LO_MS * (1 + _HIST_STEP) ** (b + 0.5)
        return float(min(max(mid, self.store.lo), self.store.hi))


def _bin(v: np.ndarray | np.float64) -> np.ndarray:
    return np.maximum(np.floor(np.log(v / _HIST_LO_MS) / math.log1p(_HIST_STEP)), 0).astype(
        np.int64)
