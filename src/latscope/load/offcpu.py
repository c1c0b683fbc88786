"""How long the client's event-loop thread waited for a CPU it was ready to run on.

Linux's ``/proc/thread-self/schedstat`` counts, per thread, nanoseconds on a CPU, nanoseconds
runnable on a run queue but not running, and time slices. The second is the one figure that
separates "the host kept latscope off the CPU" from latscope's own work: event-loop lag shows
that timestamps were late, this shows why. On a 2-core box beside a busy vLLM CPU engine in
another session, a client thread once waited 4.9 s at a stretch (server/process.py says why).
"""

from __future__ import annotations

from pathlib import Path

_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def run_queue_wait_s(path: Path = _SCHEDSTAT) -> float | None:
    """This thread's total run-queue wait so far, in seconds; None where the kernel does not
    say (not Linux, or schedstats compiled out)."""
    try:
        fields = path.read_text().split()
        return int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class RunQueueClock:
    """The run-queue wait of the thread that starts and stops it (an event loop's thread)."""

    def __init__(self) -> None:
        self.start_s: float | None = None
        self.waited_s: float | None = None

    def start(self) -> None:
        self.start_s = run_queue_wait_s()

    def stop(self) -> None:
        now = run_queue_wait_s()
        if self.start_s is not None and now is not None:
            self.waited_s = now - self.start_s
