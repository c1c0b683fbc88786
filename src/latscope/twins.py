"""The pure-Python twins of latscope's C part (``_native.c``): each takes what its C function
takes and answers what it answers (or declines where the C function would, and the caller reads
the input the long way). ``latscope.native`` picks the C functions or these, once; the stream
pass's twin is ``latscope.fastread.scan_stream``. The twins stay the reference: tests run every
C function against its twin (tests/unit/test_native.py, test_native_door.py).
"""

from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np
import orjson

from latscope.model import CHUNK_GAPS_KEY, gaps_of_times

# One request's ITL gaps: float32 values (ms) as bytes, then their float64 sum, sum of squares,
# min and max (``GapStore.add_times`` of its token times, ``json_gaps`` of its line)
Gaps = tuple[bytes, float, float, float, float]
NS_PER_MS = 1e6
_GAPS_KEY = b'"' + CHUNK_GAPS_KEY.encode() + b'":['
_BOUND = 10**18  # json_gaps reads ints of up to 18 digits (their sums stay inside 64 bits)


def gap_sums(gaps: np.ndarray) -> Gaps:
    """``gaps`` (ms) as one request's: float32 values, float64 sum, sum of squares, min, max."""
    if not gaps.size:
        return b"", 0.0, 0.0, math.inf, -math.inf
    return (gaps.astype(np.float32).tobytes(), float(gaps.sum()), float(np.square(gaps).sum()),
            float(gaps.min()), float(gaps.max()))


def gaps_of(times: list[int]) -> Gaps | None:
    """The ITL gaps (ms) between one request's token times (ns); None for fewer than two."""
    if len(times) < 2:
        return None
    return gap_sums(np.diff(np.asarray(times, dtype=np.int64)) / NS_PER_MS)


class GapStore:
    """A run's ITL gaps kept as float32 values (ms) up to ``cap``, with their float64 sum, sum
    of squares, min and max over every gap counted (``_native.GapStore``'s twin)."""

    def __init__(self, cap: int) -> None:
        self.cap, self._values = cap, array("f")
        self.count, self.total, self.total_sq = 0, 0.0, 0.0
        self.lo, self.hi = math.inf, -math.inf

    @property
    def kept(self) -> int:
        return len(self._values)

    @property
    def nbytes(self) -> int:
        return len(self._values) * self._values.itemsize

    def add_times(self, times: list[int]) -> bool:
        """The gaps between one request's token times; False (nothing kept) past the cap."""
        gaps = gaps_of(times)
        return True if gaps is None else self.add_gaps(gaps)

    def add_gaps(self, gaps: Gaps) -> bool:
        f32, total, total_sq, lo, hi = gaps
        if self.kept + len(f32) // 4 > self.cap:
            return False
        self._values.frombytes(f32)
        self.add_sums(len(f32) // 4, total, total_sq, lo, hi)
        return True

    def add_sums(self, count: int, total: float, total_sq: float, lo: float, hi: float) -> None:
        self.count += count
        self.total += total
        self.total_sq += total_sq
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)

    def values(self) -> bytes:
        return self._values.tobytes()

    def clear(self) -> None:
        self._values = array("f")


def record_line(keys: tuple[str, ...], values: tuple[Any, ...], gaps_at: int = -1) -> bytes:
    """A record's ``requests.jsonl`` line as orjson writes it: ``keys`` and ``values`` in their
    order, the list at ``gaps_at`` (token times) written as gaps."""
    if gaps_at >= 0:
        values = (*values[:gaps_at], gaps_of_times(values[gaps_at]), *values[gaps_at + 1:])
    return orjson.dumps(dict(zip(keys, values)), option=orjson.OPT_APPEND_NEWLINE)


def json_gaps(data: bytes, start: int = 0, end: int = -1
              ) -> tuple[int, int, Gaps | None] | None:
    """Where a ``requests.jsonl`` line's ``chunk_gaps_ns`` array lies (the text between its
    brackets: ``data[start:end]``) and the ITL gaps of its times (None for fewer than two);
    None where the line holds no such array or it is not a list of ints of up to 18 digits."""
    end = len(data) if end < 0 else end
    at = data.find(_GAPS_KEY, start, end)
    if at < 0:
        return None
    first = at + len(_GAPS_KEY)
    last = data.find(b"]", first, end)
    if last < 0:
        return None
    try:
        ints = orjson.loads(data[first - 1:last + 1])
    except orjson.JSONDecodeError:
        return None
    if not all(type(v) is int and -_BOUND < v < _BOUND for v in ints):
        return None
    gaps = None
    if len(ints) > 1:
        gaps = gap_sums(np.asarray(ints[1:], dtype=np.int64) / NS_PER_MS)
    return first, last, gaps
