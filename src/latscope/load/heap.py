"""glibc's heap kept whole by the client process while a load runs.

glibc's malloc gives the free top of its heap back to the kernel once more of it than
``M_TRIM_THRESHOLD`` is free (128 KiB by default, raised on its own after a large mapped block
is freed), and the next allocations fault those pages in again. A run against a full-speed
server allocates and frees a read's bytes (~34 kB for 256 tokens) for every response; on the
H100 host some runs' heaps settled where these frees kept trimming the top: +40-60% page faults
(each 4 kB of a read's copy faulted in), -14 to -17% tokens/s at c=256, and whether a run did
turned on unrelated changes to what else it allocated (docs/bench.md, "The heap's top").

So while a run sends, the trim threshold is raised to ``_HELD_BYTES`` (a process keeps at most
that much freed heap beyond what it uses), and when the last of overlapping runs ends it is put
back to glibc's default and ``malloc_trim(0)`` hands back what the run freed. Setting it stops
glibc adjusting its mmap threshold by itself for the rest of the process (it stays at its 128 KiB
default), as setting ``MALLOC_TRIM_THRESHOLD_`` in the environment does. Where the C library is
not glibc (musl, macOS) nothing is done.
"""

from __future__ import annotations

import functools
import platform
import threading
from typing import Any

_M_TRIM_THRESHOLD = -1  # mallopt's parameter number (malloc.h)
_HELD_BYTES = 64 << 20
_GLIBC_DEFAULT = 128 << 10  # mallopt(3)

_lock = threading.Lock()
_holders = 0


@functools.cache  # at the first run, not at import (ctypes is ~3 ms of a CLI's start)
def _glibc() -> Any | None:
    """The process's glibc (its mallopt and malloc_trim), or None elsewhere."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def hold() -> bool:
    """A run begins: the first of overlapping runs raises the trim threshold. Whether glibc
    took it (False where there is no glibc)."""
    global _holders
    libc = _glibc()
    if libc is None:
        return False
    with _lock:
        _holders += 1
        if _holders == 1:
            return bool(libc.mallopt(_M_TRIM_THRESHOLD, _HELD_BYTES))
    return True


def release() -> None:
    """A run ended (once per ``hold``): the last puts glibc's default back and trims."""
    global _holders
    libc = _glibc()
    if libc is None:
        return
    with _lock:
        _holders -= 1
        if _holders == 0:
            libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT)
            libc.malloc_trim(0)
