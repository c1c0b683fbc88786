"""An open loop: requests sent on a precomputed arrival schedule (``latscope.load.arrival``),
whatever is in flight, each timed from its scheduled send; the state is ``_Run``'s (a mixin,
as ``RequestFlow`` is)."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, Callable

import numpy as np

from latscope.load.arrival import arrival_offsets_ns
from latscope.load.inflight import RequestFlow
from latscope.load.workload import Prompt


class OpenLoop(RequestFlow):
    """``_Run``'s open loop."""

    def arrival_offsets(self, count: int) -> np.ndarray:
        cfg = self.config
        return arrival_offsets_ns(cfg.rate or 1.0, count, burstiness=cfg.burstiness,
                                  seed=cfg.seed)

    async def open_loop(self, indices: range, deadline_ns: int | None, *, warm_below: int = 0,
                        begin: Callable[[], Any] | None = None,
                        t0_ns: int | None = None) -> None:
        """Arrivals at the rate from ``t0_ns`` (now by default). Indices below ``warm_below``
        are warm-up requests; ``begin`` runs before the first measured one, and where it runs
        past that one's time the measured schedule starts that much later."""
        offsets = self.arrival_offsets(len(indices))
        cap = asyncio.Semaphore(self.config.concurrency) if self.config.concurrency else None

        async def capped(index: int, scheduled: int, prepared: tuple[Prompt, bytes],
                         warm: bool) -> None:
            if cap is None:
                return await self.one(index, scheduled, warm, prepared, open_loop=True)
            async with cap:  # the wait for a slot stays inside the measured latency
                await self.one(index, scheduled, warm, prepared, open_loop=True)

        tasks: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []
        t0 = time.perf_counter_ns() if t0_ns is None else t0_ns
        for index, offset in zip(indices, offsets.tolist()):
            scheduled = t0 + offset
            if deadline_ns is not None and scheduled >= deadline_ns:
                break
            if self.writer.failure is not None or self.failure is not None:
                break  # the run directory cannot be written, or a response or on_record failed
            prepared = self.prepare(index)  # before its time comes, not inside its send lag
            warm = index < warm_below
            if begin is not None and not warm:
                await begin()  # observers start (a first scrape, telemetry): it takes time
                begin = None
                late = time.perf_counter_ns() - scheduled
                if late > 0:  # the rest of the schedule moves, not into anyone's latency
                    t0, scheduled = t0 + late, scheduled + late
                    deadline_ns = None if deadline_ns is None else deadline_ns + late
            delay = scheduled - time.perf_counter_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            task = asyncio.create_task(capped(index, scheduled, prepared, warm))
            tasks.add(task)  # finished tasks leave the set: memory stays with what is in flight
            task.add_done_callback(functools.partial(_forget, tasks, failures))
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise
        if failures:
            raise failures[0]
        self.stop_if_failed()
        self.finalize_all()
        self.stop_if_failed()

    async def _open_load(self, begin: Callable[[], Any] | None, clocks_start: Callable[[], Any],
                         duration_ns: int | None) -> tuple[Any, int | None]:
        """An open loop's arrivals and the time its --duration ends (None: -n)."""
        cfg = self.config
        start = cfg.warmup
        stop = start + cfg.num_requests if cfg.num_requests else start + len(self.workload.prompts)
        deadline = (time.perf_counter_ns() + duration_ns) if duration_ns else None
        if begin is not None:
            # the warm-up arrivals first: the measured --duration starts where they end
            t0 = time.perf_counter_ns()
            if deadline is not None:
                deadline += int(self.arrival_offsets(start + 1)[start])
            return self.open_loop(range(0, stop), deadline, warm_below=start,
                                  begin=clocks_start, t0_ns=t0), deadline
        await clocks_start()
        return self.open_loop(range(start, stop), deadline), deadline


def _forget(tasks: set[asyncio.Task[None]], failures: list[BaseException],
            task: asyncio.Task[None]) -> None:
    tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        failures.append(task.exception())  # type: ignore[arg-type]
