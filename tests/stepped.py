"""Two ``diagnose`` runs that start their own servers, interleaved so that their vLLM starts
pair up and nothing they time overlaps.

A start of the tiny model's vLLM keeps one core busy for ~35 s (two processes importing torch
and vLLM one after the other), so on a 2-core box a diagnose that starts its server, and later
its A/B's B server, leaves half the box idle for ~70 s. Two such runs side by side would time
each other's load, but their starts can pair: each run here goes in a thread of its own and
pauses at given points of its progress (before its first stage after the start, before its
A/B's B start, before the A/B's first run) until told to go on. ``interleave`` moves two runs
through those points so that every start has the other run's start beside it and every
measured stage runs with the other run paused (its servers idle: 2% of a core, measured).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

# How long one run may take between two of its pauses before the test fails (a start is
# 35-60 s here, an A/B of ~100-request runs ~80 s; generous for a loaded CI box)
STEP_TIMEOUT_S = 600.0


class Abandoned(Exception):
    """Raised in a paused run's thread to end it (``SteppedRun.abandon``)."""


class SteppedRun:
    """``run(progress)`` in a thread of its own, paused at the first progress line that starts
    with each of ``pauses`` (in that order) until ``go()``. ``at``: the pause it waits in, or
    None while it runs or after it ended."""

    def __init__(self, name: str, run: Callable[[Callable[[str], None]], Any],
                 pauses: Sequence[str]) -> None:
        self.name, self._run, self._pauses = name, run, list(pauses)
        self._cond = threading.Condition()
        self._released = self._abandoned = self._started = False
        self.at: str | None = None
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._main, name=f"stepped-{name}", daemon=True)

    def start(self) -> SteppedRun:
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def _progress(self, line: str) -> None:
        self.lines.append(line)
        text = line.strip()
        if not self._pauses or not text.startswith(self._pauses[0]):
            return
        with self._cond:
            self.at, self._released = self._pauses.pop(0), False
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._released)
            if self._abandoned:  # out through diagnose's own cleanup: its servers stop
                raise Abandoned(f"{self.name} was abandoned at its pause")

    def _main(self) -> None:
        try:
            self.result = self._run(self._progress)
        except BaseException as exc:  # raised in the test that reads this run's result
            self.error = exc
        finally:
            with self._cond:
                self.done = True
                self._cond.notify_all()

    def paused(self) -> str | None:
        """Waits until the run waits in a pause (returned) or has ended (None)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.at is not None or self.done,
                                       timeout=STEP_TIMEOUT_S):
                raise TimeoutError(f"{self.name}: no pause nor end in {STEP_TIMEOUT_S:.0f} s "
                                   f"after: {self.lines[-3:]}")
            return self.at

    def go(self) -> None:
        with self._cond:
            self._released, self.at = True, None
            self._cond.notify_all()

    def abandon(self) -> None:
        """Ends a run that waits in a pause (its servers stopped as on any error), or lets a
        running one go on to its end without pausing again; then waits for it."""
        self._pauses.clear()
        with self._cond:
            self._abandoned = self.at is not None
        if self._started:
            self.go()
            self._thread.join(timeout=STEP_TIMEOUT_S * 3)

    def run_to_end(self) -> None:
        """Lets the run go through every pause left and waits for its end."""
        self._pauses.clear()
        self.start()
        self.go()
        self._thread.join(timeout=STEP_TIMEOUT_S * 3)
        if self._thread.is_alive():
            raise TimeoutError(f"{self.name} did not end: {self.lines[-3:]}")

    def finish(self) -> Any:
        """``run_to_end``, then the run's result (or its exception, raised here)."""
        self.run_to_end()
        if self.error is not None:
            raise self.error
        return self.result


# The points of a diagnose's progress to pause at: after its server start (its first stage),
# before its A/B's B start (the proof's first line), before the A/B's first run
DIAGNOSE_PAUSES = ("[1] doctor", "proving ", "A1:")


def interleave(first: SteppedRun, second: SteppedRun) -> None:
    """Moves two diagnose runs, each paused at ``DIAGNOSE_PAUSES``, so that their starts pair:
    both servers start together; ``first`` measures up to its B start, then ``second`` up to
    its own; both B servers start together; ``first`` then runs to its end. ``second`` is left
    paused before its A/B's first run (``finish()`` it). A run that ends early (a stage failed,
    or no A/B to prove) just stops taking part."""
    for run in (first, second):
        run.start()
    _both_paused(first, second)  # both servers up
    _step(first)  # first's sweep, alone: up to its B start
    _step(second)  # second's sweep, alone: up to its B start
    for run in (first, second):  # both B servers start together
        run.go()
    _both_paused(first, second)
    first.run_to_end()


def _step(run: SteppedRun) -> None:
    if run.at is not None:
        run.go()
        run.paused()


def _both_paused(*runs: SteppedRun) -> None:
    for run in runs:
        run.paused()
