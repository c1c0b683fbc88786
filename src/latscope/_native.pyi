"""latscope's optional C part (src/latscope/_native.c, built by setup.py where a compiler is
found); latscope.native is the one door to it, with a pure-Python twin of each function."""

from typing import Any

def scan_stream(reads: list[tuple[int, bytes]], skip: int = 0, /
                ) -> tuple[list[int], bytes] | None: ...
def record_line(keys: tuple[str, ...], values: tuple[Any, ...], gaps_at: int = -1, /
                ) -> bytes | None: ...
def json_gaps(data: bytes, start: int = 0, end: int = -1, /
              ) -> tuple[int, int, tuple[bytes, float, float, float, float] | None] | None: ...

KEY_SEARCH: str  # the key search this CPU runs: "avx512bw", "avx2", "sse2" or "portable"

class GapStore:
    cap: int
    kept: int
    count: int
    total: float
    total_sq: float
    lo: float
    hi: float
    nbytes: int
    def __init__(self, cap: int) -> None: ...
    def add_times(self, times: list[int], /) -> bool: ...
    def add_gaps(self, gaps: tuple[bytes, float, float, float, float], /) -> bool: ...
    def add_sums(self, count: int, total: float, total_sq: float, lo: float, hi: float,
                 /) -> None: ...
    def values(self) -> bytes: ...
    def clear(self) -> None: ...
