"""Python's cyclic garbage collector paced by finished requests while a load runs.

Left to itself the collector runs a young-generation pass every 700 net allocations of tracked
objects, and at high concurrency such a pass walks every in-flight request's objects (tasks,
futures, records, parser state): at c=1024 against a full-speed server, 59 passes of ~2.2 ms in
a 2 s run, 6.5% of the client's CPU and each one a stall of the event loop, and they freed
nothing (a request makes no reference cycles: 0 objects collected over 32,768 requests;
docs/bench.md). So while a run sends, latscope

- freezes what the setup built (``gc.freeze``: modules, prompts, the workload), which no pass
  then walks again, and
- turns automatic collection off and collects itself every ``max(4096, 4 x concurrency)``
  finished requests or once a second, whichever comes first (the young generations; the whole
  heap every 16th time), so a cycle a request does make (an error's traceback) is still freed,
  at most that many requests or a second later, and a pass costs at most ~0.5 us a request
  whatever the concurrency (a pass walks ~35 objects a request in flight). The second is for
  slow servers: what else runs in the process meanwhile (scrapes, telemetry) is collected too.

Everything is put back when the run ends: collection on again, the objects unfrozen. A process
that turned collection off itself, or froze objects of its own, is left as it was (only its
pacing is skipped). Runs that overlap (threads) share one setting: the first to start sets it,
the last to end puts it back. The same start and stop hold glibc's heap for the run
(``latscope.load.heap``): the process's memory, kept as a run needs it.
"""

from __future__ import annotations

import gc
import threading
import time
from types import TracebackType

from latscope.load import heap

_MIN_EVERY = 4096
_PER_SLOT = 4
_FULL_EVERY = 16  # young passes between two passes over the whole (unfrozen) heap
_PERIOD_NS = 1_000_000_000  # at most this long between two passes while requests finish

_lock = threading.Lock()
_active = 0  # runs pacing the collector now
_froze = False  # whether the first of them froze (and the last must unfreeze)


class CollectorPace:
    """One run's pace: ``start()`` as it begins (or ``with``), ``finished()`` once per
    finished request, ``stop()`` when it ends, whatever ended it."""

    __slots__ = ("every", "left", "due_ns", "passes", "pacing", "holding")

    def __init__(self, concurrency: int | None) -> None:
        self.every = max(_MIN_EVERY, _PER_SLOT * (concurrency or 1))
        self.left = self.every
        self.due_ns = time.perf_counter_ns() + _PERIOD_NS
        self.passes = 0
        self.pacing = False
        self.holding = False

    def __enter__(self) -> CollectorPace:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """The run begins: the first of overlapping runs freezes and turns collection off."""
        global _active, _froze
        if not self.holding:
            heap.hold()
            self.holding = True
        with _lock:
            if _active:
                self.pacing = True
            elif gc.isenabled():  # a process that turned it off keeps it off, unpaced
                _froze = gc.get_freeze_count() == 0  # another's frozen objects stay theirs
                if _froze:
                    gc.freeze()
                gc.disable()
                self.pacing = True
            if self.pacing:
                _active += 1
        self.due_ns = time.perf_counter_ns() + _PERIOD_NS

    def stop(self) -> None:
        """The run ended, however: the last of overlapping runs puts the collector back."""
        global _active, _froze
        if self.holding:
            self.holding = False
            heap.release()
        if not self.pacing:
            return
        self.pacing = False
        with _lock:
            _active -= 1
            if _active == 0:
                if _froze:
                    gc.unfreeze()
                    _froze = False
                gc.enable()

    def finished(self) -> None:
        """One request finished: a collection (young, or whole) every ``every``-th, or the
        first after a second without one."""
        self.left -= 1
        if self.left > 0 and time.perf_counter_ns() < self.due_ns or not self.pacing:
            return
        self.left = self.every
        self.passes += 1
        gc.collect(2 if self.passes % _FULL_EVERY == 0 else 1)
        self.due_ns = time.perf_counter_ns() + _PERIOD_NS
