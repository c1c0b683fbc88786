"""Interval arithmetic on numpy arrays of [start, end) nanosecond intervals.

Every time share latscope reports is built from these unions, never from summed durations, so
concurrent streams are not double counted (the sum-vs-union pitfall of rocpd ``busy`` and nsys).
"""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint ones (touching intervals are merged)."""
    if len(starts) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy()
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new_segment = np.empty(len(s), dtype=bool)
    new_segment[0] = True
    new_segment[1:] = s[1:] > run_end[:-1]
    seg_start = s[new_segment]
    # the running maximum at each segment's last interval is that segment's end (not a
    # maximum.at into zeros: that loses segments ending before 0, on clocks that allow it)
    last_of_segment = np.r_[np.flatnonzero(new_segment)[1:] - 1, len(s) - 1]
    seg_end = run_end[last_of_segment]
    return seg_start, seg_end


def length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of a union (disjoint intervals)."""
    return int(np.sum(ends - starts)) if len(starts) else 0


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    return length(*union(starts, ends))


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Clip intervals to [lo, hi]; intervals left empty are dropped."""
    s, e = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
    keep = e > s
    return s[keep], e[keep]


def complement(us: np.ndarray, ue: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of a disjoint union inside [lo, hi]."""
    starts = np.concatenate(([lo], ue))
    ends = np.concatenate((us, [hi]))
    starts, ends = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
    keep = ends > starts
    return starts[keep], ends[keep]


def overlap_with(starts: np.ndarray, ends: np.ndarray, us: np.ndarray,
                 ue: np.ndarray) -> np.ndarray:
    """Per interval, how much of it lies inside the disjoint union (us, ue). Vectorised."""
    if len(us) == 0:
        return np.zeros(len(starts), dtype=np.int64)
    before = np.concatenate(([0], np.cumsum(ue - us)))  # covered length before segment i

    def covered_until(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(us, t, side="right") - 1
        inside = np.where(i >= 0, np.minimum(t, ue[np.maximum(i, 0)]) - us[np.maximum(i, 0)], 0)
        return np.where(i >= 0, before[np.maximum(i, 0)] + inside, 0)

    return covered_until(ends) - covered_until(starts)
