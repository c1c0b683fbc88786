"""One bench run driven by several client processes: local ones (``--workers N``) or Ray actors
(``--ray``), merged into the one run directory a single-process run writes.

Why: one event loop on one core streams only so many tokens/s before its own lag distorts the
timestamps it takes (docs/bench.md). Splitting keeps the measured workload what one process's
would be:

- closed loop: ``concurrency`` split as evenly as possible; the request count split in
  proportion to each worker's slots, as contiguous index blocks (request ids stay unique);
- open loop: the one global arrival schedule (the same seed gives the same schedule as a
  single-process run) is *thinned*: each arrival goes to a seeded random worker, so the union of
  what the workers send is exactly the global Poisson/gamma process (and each worker's share of
  a Poisson process is itself Poisson at rate/N).

The driver does the setup (model, tokenizer, prompts) and the warm-up once, then gives
every worker its share and one common start time. Workers append their finished records to
``requests.jsonl`` in batches, every 0.1 s: a local worker on the driver's clock writes them to
the file itself (opened for appending: each batch lands whole), a Ray actor (or any worker
while the driver calls back per record) streams them to the driver, which appends them. A
worker that dies loses only what it had in flight, and the run says which worker died and
why. Each worker counts its share's statistics itself and sends them at its end; the driver
merges them (``merge_worker_stats``: the summary is the one counting every record gives) and
counts from the file only the records of a worker whose statistics never came.

Clocks: records carry each worker's ``perf_counter_ns``. The driver measures every worker's
offset with a ping exchange (NTP's: offset = t_worker - (t_send + t_recv) / 2, error bound = half
the round trip, the exchange with the shortest round trip kept) and subtracts it before merging.
On one host CLOCK_MONOTONIC is shared by every process, so the offset is ~0 within its bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import queue
import threading
import time
from typing import Any, Callable, Iterable, Protocol

from latscope.errors import ConfigError, OutputError
from latscope.load.client import check_headers
from latscope.load.clocks import measure_offset
from latscope.load.config import BenchConfig
from latscope.load.merge import (
    Inbox,
    WorkerState,
    merge_worker_stats,
    merged_client_figures,
    summed_prompt_figures,
    write_batches,
)
from latscope.load.prepare import (
    check_lengths,
    discover_model,
    make_manifest,
    pick_tokenizer,
    prompt_count,
    request_headers,
    split_url,
)
from latscope.load.runner import (
    BenchResult,
    OnRecord,
    RunInterrupted,
    _Run,
    _stoppable,
    add_staggers,
)
from latscope.load.shares import plan_shares
from latscope.load.worker import (
    HostFacts,
    WorkerDied,
    WorkerResult,
    WorkerSpec,
    _local_main,
    boot_id,
    run_loop,
)
from latscope.load.workload import build_workload
from latscope.model import RunContext, RunObserver
from latscope.rundir import REQUESTS

_START_MARGIN_NS = 300_000_000  # the common start lies this far after the "go" is sent
_READY_TIMEOUT_S = 120.0
# how long workers asked to stop (the driver interrupted) have to send their records and
# statistics back before they are stopped (a worker ends its run in ~0.1 s)
_STOP_GRACE_S = 10.0

class WorkerHandle(Protocol):
    name: str

    def wait_ready(self, timeout_s: float) -> HostFacts: ...

    def ping(self) -> int: ...

    def go(self, start_ns: int) -> None: ...

    def stream(self, sink: Callable[[bytes], None]) -> WorkerResult: ...

    def stop(self) -> None: ...


class LocalWorker:
    """A worker process on this host (spawned: no fork of a process that runs an event loop)."""

    def __init__(self, index: int, spec: WorkerSpec) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.name = f"worker {index}"
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_local_main, args=(child,), daemon=True,
                                name=f"latscope-bench-worker-{index}")
        self.proc.start()
        child.close()
        self.conn.send(spec)

    def _recv(self, timeout_s: float | None = None) -> tuple:
        if timeout_s is not None and not self.conn.poll(timeout_s):
            raise WorkerDied(f"{self.name}: no answer within {timeout_s:.0f} s")
        try:
            msg = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerDied(f"{self.name} (pid {self.proc.pid}) died: "
                             f"{self._exit_reason()}") from None
        if msg[0] == "error":
            raise WorkerDied(f"{self.name} (pid {self.proc.pid}) failed: {msg[1]}")
        return msg

    def _exit_reason(self) -> str:
        self.proc.join(timeout=2)
        code = self.proc.exitcode
        if code is None:
            return "its connection closed"
        if code < 0:
            import signal
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def wait_ready(self, timeout_s: float) -> HostFacts:
        facts: HostFacts = self._recv(timeout_s)[1]
        return facts

    def ping(self) -> int:
        self.conn.send(("ping",))
        return int(self._recv(30)[1])

    def go(self, start_ns: int, records_path: str | None = None) -> None:
        """Start at ``start_ns``; with ``records_path``, the worker appends its records to that
        file itself instead of sending them (``_appends_itself``)."""
        self.conn.send(("go", start_ns, records_path))

    def stream(self, sink: Callable[[bytes], None]) -> WorkerResult:
        while True:
            msg = self._recv()
            if msg[0] == "records":
                sink(msg[1])
            elif msg[0] == "done":
                result: WorkerResult = msg[1]
                return result

    def request_stop(self) -> None:
        """Asks the worker to end its run now: it sends what it finished and its statistics
        ("done"), as at a normal end (``stop`` ends what does not)."""
        if self.proc.is_alive():
            with contextlib.suppress(OSError, ValueError):  # gone, or its pipe closed
                self.conn.send(("stop",))

    def stop(self) -> None:
        """Stops only the process this handle started (by its PID, via the Process object)."""
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(timeout=5)
        self.conn.close()



def free_cores() -> int:
    """Cores this process may use minus the 1-minute load average (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, int(cores or 1) - round(os.getloadavg()[0]))


# What one client process carries before its own event-loop lag distorts its timestamps
# (docs/bench.md, benchmarks/client_ceiling.py): a closed loop's slots, an open loop's rate.
SLOTS_PER_WORKER = 256
RATE_PER_WORKER = 1000.0


def auto_workers(config: BenchConfig, spare_cores: int | None = None) -> int:
    """``--workers auto``: as many client processes as the load needs (one per
    ``SLOTS_PER_WORKER`` slots, or per ``RATE_PER_WORKER`` req/s of an open loop), at most the
    spare cores (the free cores less the driver's own), at least 1. 1 means one process, the
    plain ``run_bench``; callers (bench, sweep, diagnose) use ``run_load``."""
    spare = free_cores() - 1 if spare_cores is None else spare_cores
    if config.rate:
        need = math.ceil(config.rate / RATE_PER_WORKER)
    else:
        need = math.ceil((config.concurrency or 1) / SLOTS_PER_WORKER)
    return max(1, min(need, spare))


def run_load(config: BenchConfig, workers: int | str = "auto",
             observers: Iterable[RunObserver] = (), on_record: OnRecord | None = None,
             ) -> BenchResult:
    """One run with ``workers`` local client processes (a number, or "auto": ``auto_workers``);
    one worker is the one-process ``run_bench``. The summary's ``load.workers_chosen`` says how
    many ran and why."""
    from latscope.load.runner import run_bench

    chosen = auto_workers(config) if workers == "auto" else int(workers)
    if chosen < 1:
        raise ConfigError("--workers must be at least 1")
    why = (f"auto: {chosen} for concurrency {config.concurrency} / rate {config.rate} on "
           f"{free_cores()} free cores" if workers == "auto" else "asked")
    if chosen == 1:
        result = run_bench(config, observers, on_record=on_record)
    else:
        result = run_workers(config, chosen, observers=observers, on_record=on_record)
    result.summary["load"]["workers_chosen"] = {"count": chosen, "why": why}
    return result


def run_workers(config: BenchConfig, workers: int | None, *, backend: str = "local",
                ray_address: str | None = None, observers: Iterable[RunObserver] = (),
                on_record: OnRecord | None = None) -> BenchResult:
    """``run_bench`` with the load split over ``workers`` processes (``backend`` local | ray).
    The result's summary has a ``workers`` list; ``summary["workers_failed"]`` names any that
    died (their finished records are in the run). Raises ``RunInterrupted`` after SIGTERM and
    KeyboardInterrupt after Ctrl-C, as ``run_bench`` does, with the workers' records and
    statistics and the summary on disk."""
    result, signum = run_loop(lambda: _stoppable(arun_workers(
        config, workers, backend=backend, ray_address=ray_address, observers=observers,
        on_record=on_record)), config.use_uvloop)
    if signum:
        raise RunInterrupted(signum, config.output_dir)
    return result


async def arun_workers(config: BenchConfig, workers: int | None, *, backend: str = "local",
                       ray_address: str | None = None, observers: Iterable[RunObserver] = (),
                       on_record: OnRecord | None = None) -> BenchResult:
    config.validate()
    start_handles = _backend(backend, ray_address)
    if workers is None:  # Ray without --workers: one per node
        from latscope.load import rayworkers
        workers = rayworkers.alive_nodes()
    base_url, credentials = split_url(config.url)
    headers = request_headers(config.api_key, credentials)
    check_headers(headers)
    model = config.model or await asyncio.to_thread(discover_model, base_url, headers)
    assert model is not None  # discover_model raises where the server lists no model
    tokenizer = await asyncio.to_thread(pick_tokenizer, config, base_url, model, headers)
    await asyncio.to_thread(check_lengths, config, base_url, headers)
    workload = await asyncio.to_thread(build_workload, config.workload, prompt_count(config),
                                       tokenizer, config.seed, config.size_seed)
    shares = plan_shares(config, workers, len(workload.prompts))
    # the driver sends the warm-up; each worker builds its own share's prompts
    await asyncio.to_thread(workload.prompts.prebuild, range(config.warmup), config.warmup)
    run = _Run(config, base_url, headers, model, workload, on_record)
    manifest = make_manifest(config, base_url, model, workload, run.tag)
    manifest["workers"] = {"backend": backend, "count": workers,
                           "split": "closed: slots even, requests by slots" if config.rate is None
                           else "open: global arrival schedule thinned per worker"}
    run.writer.write_manifest(manifest)
    states: list[WorkerState] = []
    inbox: Inbox = queue.SimpleQueue()
    observers = list(observers)
    started: list[RunObserver] = []
    ctx = None
    try:
        if config.warmup and config.rate is not None:  # once, by the driver, at the rate
            await run.open_loop(range(config.warmup), None, warm_below=config.warmup)
        elif config.warmup:  # once, by the driver, before any worker sends
            await run.closed_loop(range(config.warmup), min(config.concurrency or 1,
                                                             config.warmup), warmup=True)
        specs = [WorkerSpec(config, base_url, headers, model, workload, run.tag, s,
                            run.request_time_ns, s.worker / max(len(shares), 1))
                 for s in shares]
        states = await asyncio.to_thread(_start, start_handles, specs)
        start_ns = time.perf_counter_ns() + _START_MARGIN_NS
        ctx = RunContext(base_url=base_url, run_dir=run.writer.run_dir, headers=headers,
                         start_ns=start_ns, start_wall=time.time() + _START_MARGIN_NS / 1e9)
        manifest.update(start_ns=ctx.start_ns, start_wall=ctx.start_wall)
        manifest["workers"]["clocks"] = [{"worker": s.index, **s.host_fields(),
                                          **s.clock.to_dict()}
                                         for s in states if s.clock]
        run.writer.write_manifest(manifest)
        for obs in observers:
            await obs.start(ctx)
            started.append(obs)
        await _drive(run, states, start_ns, inbox)
        await asyncio.to_thread(_clocks_after, states)
        manifest["workers"]["clocks_after"] = [
            {"worker": s.index, **s.clock_after.to_dict()} for s in states if s.clock_after]
        run.writer.write_manifest(manifest)
    finally:
        end_workers(run, states, inbox)
        if ctx is not None:  # observers start only once ctx is set
            for obs in started:
                with contextlib.suppress(Exception):  # one observer's failure must not lose data
                    await obs.stop(ctx)
        merge_worker_stats(run, states)
        summary = run.summary()
        summary["client"] = merged_client_figures([s.report() for s in states], summary)
        summary["client"]["prompts"] = summed_prompt_figures(  # the driver built the warm-up's
            [{"prompts": run.workload.prompts.figures()}, *(s.report() for s in states)])
        summary["workers"] = [s.report() for s in states]
        summary["workers_failed"] = [f"worker {s.index}: {s.error}" for s in states if s.error]
        summary["load"]["workers"] = {"backend": backend, "count": workers}
        # each worker's closed loop staggered (and ramped) its own slots
        add_staggers(summary, run.staggers + [loop for s in states
                                              for loop in (s.figures or {}).get("stagger") or []])
        run.writer.write_summary(summary)
        run.writer.close()
        run.client.close()
    return BenchResult(run.writer.run_dir, summary, config, manifest)


def _backend(backend: str, ray_address: str | None) -> Callable[[int, WorkerSpec], Any]:
    if backend == "local":
        return LocalWorker
    if backend != "ray":
        raise ConfigError(f"unknown worker backend {backend!r}: use local or ray")
    try:
        from latscope.load import rayworkers
    except ImportError as exc:
        if exc.name != "ray":
            raise
        raise ConfigError("bench --ray needs Ray: pip install 'latscope[ray]'") from None
    rayworkers.connect(ray_address)
    return rayworkers.RayWorker


def _start(make: Callable[[int, WorkerSpec], Any], specs: list[WorkerSpec]) -> list[WorkerState]:
    """Start every worker, wait until all are set up, measure their clocks."""
    states: list[WorkerState] = []
    try:
        for spec in specs:
            states.append(WorkerState(spec.share.worker, make(spec.share.worker, spec), spec.share))
        deadline = time.monotonic() + _READY_TIMEOUT_S
        for state in states:
            state.facts = state.handle.wait_ready(max(deadline - time.monotonic(), 1.0))
            state.clock = measure_offset(state.handle.ping)
            same_clock = state.facts.boot_id and state.facts.boot_id == boot_id()
            state.clock.applied_ns = 0 if same_clock else state.clock.offset_ns
    except BaseException:
        for state in states:
            with contextlib.suppress(Exception):
                state.handle.stop()
        raise
    return states


def _clocks_after(states: list[WorkerState]) -> None:
    """A second offset after the run: the drift between the clocks during it."""
    for state in states:
        if state.error is None and hasattr(state.handle, "ping_after_run"):
            with contextlib.suppress(WorkerDied):
                state.clock_after = measure_offset(state.handle.ping_after_run, 5)



async def _drive(run: _Run, states: list[WorkerState], start_ns: int, inbox: Inbox) -> None:
    """Send "go", then write what the workers stream back until every one finished or died."""

    def follow(state: WorkerState) -> None:
        try:
            result = state.handle.stream(lambda data: inbox.put((state, data)))
            state.stats, state.groups, state.figures = result.stats, result.groups, result.figures
        except WorkerDied as exc:
            state.error = str(exc)
        except Exception as exc:  # a backend error: still "this worker, this reason"
            state.error = f"{type(exc).__name__}: {exc}"

    run.writer.flush()  # the warm-up's lines first
    for state in states:
        assert state.clock is not None
        state.appends = _appends_itself(run, state)
        if state.appends:
            state.handle.go(start_ns, str(run.writer.run_dir / REQUESTS))
        else:
            state.handle.go(start_ns + state.clock.applied_ns)
        state.thread = threading.Thread(target=follow, args=(state,), daemon=True,
                                        name=f"latscope-follow-{state.index}")
        state.thread.start()
    while True:
        alive = any(s.thread and s.thread.is_alive() for s in states)
        write_batches(run, inbox)
        if run.failure is not None:  # the caller's on_record raised: the run stops with it
            raise run.failure
        run.writer.flush_if_due()  # what came in reaches the file even when nothing follows
        if not alive:
            return
        await asyncio.sleep(0.05)


def _appends_itself(run: _Run, state: WorkerState) -> bool:
    """Whether this worker appends its lines to the run's requests.jsonl itself: a local
    process on the driver's clock (its lines need no shift) while the driver calls back no one
    per record. The driver received, unpickled and wrote every line of the others: ~9 us of
    its CPU a record, a whole core at ~110k records/s (13 workers on the 16-core host), past
    which the workers waited on their pipes."""
    return (isinstance(state.handle, LocalWorker) and run.on_record is None
            and state.clock is not None and state.clock.applied_ns == 0)



def end_workers(run: _Run, states: list[WorkerState], inbox: Inbox) -> None:
    """Every worker ended and what it sent written. One still running (the driver was
    interrupted, or failed) is asked to stop and send its records and statistics, for
    ``_STOP_GRACE_S``; then any process left is stopped."""
    # local workers only: a Ray actor is stopped at once, as before (what it finished since
    # its last poll is lost; what it sent is counted from the file)
    asked = [s for s in states if s.thread is not None and s.thread.is_alive()
             and hasattr(s.handle, "request_stop")]
    for state in asked:
        state.handle.request_stop()
    deadline = time.monotonic() + _STOP_GRACE_S
    for state in asked:
        assert state.thread is not None
        state.thread.join(max(deadline - time.monotonic(), 0.0))
    for state in states:
        with contextlib.suppress(Exception):
            state.handle.stop()
    with contextlib.suppress(OutputError):  # a full disk: the writer said so already
        write_batches(run, inbox)
