"""glibc's heap kept whole while a run sends, and handed back after it."""

from __future__ import annotations

import ctypes
import gc

import pytest

import latscope.load.heap as heap
from latscope.load.gcpace import CollectorPace

pytestmark = pytest.mark.skipif(heap._glibc() is None, reason="glibc's mallopt only")


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None)  # its own handle: argument types set here stay here
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.sbrk.restype = ctypes.c_void_p
    libc.sbrk.argtypes = [ctypes.c_ssize_t]
    return libc


def _freed_top_kept(libc: ctypes.CDLL) -> tuple[int, int]:
    """(bytes the heap's break grew by for 16 MiB of 64 KiB blocks, bytes of it still there
    once they are all freed): the blocks are below the mmap threshold, so they come from the
    top of the heap, and freed they join it again."""
    start = libc.sbrk(0)
    blocks = [libc.malloc(64 << 10) for _ in range(256)]
    grown = libc.sbrk(0) - start
    for block in reversed(blocks):
        libc.free(block)
    return grown, libc.sbrk(0) - start


def test_a_held_heap_keeps_its_freed_top_and_hands_it_back_when_released():
    libc = _libc()
    assert heap.hold()
    try:
        grown, kept = _freed_top_kept(libc)
        # not trimmed: the next run's reads reuse it (>=: only this thread grows the main heap,
        # but a larger break is no trim either)
        assert grown >= 8 << 20 and kept >= grown
    finally:
        heap.release()
    after = libc.sbrk(0)
    # released: glibc's default again, so the same churn is trimmed as it is freed
    grown, kept = _freed_top_kept(libc)
    assert grown >= 8 << 20 and kept < grown // 2
    assert heap._holders == 0 and after > 0


def test_overlapping_runs_hold_it_once_and_the_last_to_end_releases_it():
    libc = _libc()
    first, second = CollectorPace(64), CollectorPace(64)
    gc.disable()  # a process that turned collection off is not paced: its heap is still held
    try:
        first.start()
        second.start()
        assert not first.pacing and heap._holders == 2
        first.stop()
        grown, kept = _freed_top_kept(libc)
        assert kept >= grown  # the second run still holds it
        second.stop()
        second.stop()  # a second stop releases nothing more
        assert heap._holders == 0
        grown, kept = _freed_top_kept(libc)
        assert kept < grown // 2
    finally:
        gc.enable()
