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
every worker its share and one common start time. Workers stream finished records back in
batches; the driver appends them to ``requests.jsonl`` as they come, so a worker that dies loses
only what it had in flight, and the run says which worker died and why.

Clocks: records carry each worker's ``perf_counter_ns``. The driver measures every worker's
offset with a ping exchange (NTP's: offset = t_worker - (t_send + t_recv) / 2, error bound = half
the round trip, the exchange with the shortest round trip kept) and subtracts it before merging.
On one host CLOCK_MONOTONIC is shared by every process, so the offset is ~0 within its bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
import multiprocessing
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np
import orjson

from latscope.analysis.stats import distribution
from latscope.errors import ConfigError, LatscopeError
from latscope.load.arrival import arrival_offsets_ns
from latscope.load.client import check_headers
from latscope.load.config import BenchConfig
from latscope.load.prepare import (
    check_lengths,
    discover_model,
    make_manifest,
    pick_tokenizer,
    prompt_count,
    request_headers,
    split_url,
)
from latscope.load.runner import BenchResult, OnRecord, _Run, client_warnings
from latscope.load.workload import Workload, build_workload
from latscope.model import RequestRecord, RunContext, RunObserver

_START_MARGIN_NS = 300_000_000  # the common start lies this far after the "go" is sent
_FLUSH_S = 0.1  # how often a worker sends its finished records back
_PINGS = 15
_READY_TIMEOUT_S = 120.0
_DURATION_INDEX_SPAN = 10**9  # closed-loop --duration runs: indices are drawn from this span
_TIME_FIELDS = ("scheduled_ns", "sent_ns", "headers_ns", "first_token_ns", "end_ns")


class WorkerDied(LatscopeError):
    """A worker stopped before finishing its share (the message says which and why)."""


# ----------------------------------------------------------------------------------------------
# Splitting the workload (pure functions)


@dataclass
class Share:
    """What one worker sends: ``indices`` (into the prompt pool) and, open loop, each one's
    scheduled offset from the common start; ``concurrency`` is its slots (closed loop) or its
    cap on requests in flight (open loop, None: no cap)."""

    worker: int
    indices: Sequence[int]
    offsets_ns: list[int] | None
    concurrency: int | None

    @property
    def size(self) -> int | None:
        """Requests this share sends at most (None: until the duration ends)."""
        return None if len(self.indices) >= _DURATION_INDEX_SPAN // 2 else len(self.indices)


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one (larger ones first)."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def split_proportionally(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder; sums to ``total``)."""
    w = np.asarray(weights, dtype=np.float64)
    exact = total * w / w.sum()
    counts = np.floor(exact).astype(np.int64)
    for i in np.argsort(-(exact - counts), kind="stable")[: total - int(counts.sum())]:
        counts[i] += 1
    return counts.tolist()


def plan_shares(config: BenchConfig, workers: int, pool_size: int) -> list[Share]:
    """Each worker's share of the measured requests (warm-up is the driver's)."""
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    start = config.warmup
    if config.rate is None:
        slots = split_evenly(config.concurrency or 1, workers)
        if min(slots) < 1:
            raise ConfigError(f"closed loop with concurrency {config.concurrency or 1} cannot feed "
                              f"{workers} workers: each needs at least one slot")
        if not config.num_requests:  # --duration: disjoint strided index sets, no end
            return [Share(i, range(start + i, start + _DURATION_INDEX_SPAN, workers), None, c)
                    for i, c in enumerate(slots)]
        shares, first = [], start
        for i, (c, n) in enumerate(zip(slots, split_proportionally(config.num_requests, slots))):
            shares.append(Share(i, range(first, first + n), None, c))
            first += n
        return shares
    count = config.num_requests or (pool_size - start)
    offsets = arrival_offsets_ns(config.rate, count, burstiness=config.burstiness,
                                 seed=config.seed)
    owner = np.random.default_rng([config.seed, 1]).integers(0, workers, size=count)
    caps: list[int | None] = [None] * workers
    if config.concurrency:
        caps = list(split_evenly(config.concurrency, workers))
        if min(caps) < 1:
            raise ConfigError(f"a cap of {config.concurrency} in flight cannot be split over "
                              f"{workers} workers")
    shares = []
    for i in range(workers):
        mine = np.flatnonzero(owner == i)
        shares.append(Share(i, (mine + start).tolist(), offsets[mine].tolist(), caps[i]))
    return shares


# ----------------------------------------------------------------------------------------------
# The worker side (runs in a worker process or a Ray actor)


@dataclass
class WorkerSpec:
    config: BenchConfig
    base_url: str
    headers: dict[str, str] = field(repr=False)
    model: str  # request bodies are built from the workload's prompts as they are sent
    workload: Workload
    tag: str
    share: Share
    # the driver's warm-up measured one request's time: the worker staggers its slots by it,
    # shifted by worker/workers of a slot so the workers' slots interleave (latscope.load.stagger)
    request_time_ns: int | None = None
    stagger_offset: float = 0.0


def host_facts() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "boot_id": boot_id()}


def boot_id() -> str | None:
    """The kernel's boot id: processes that share it share CLOCK_MONOTONIC (containers too)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


class WorkerRun:
    """One worker's part of a run: a ``_Run`` of the runner fed with this worker's share."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.scratch = Path(tempfile.mkdtemp(prefix="latscope-worker-"))
        config = copy.copy(spec.config)
        config.output_dir = self.scratch  # the driver keeps the real records; this is a scratch
        self.run = _Run(config, spec.base_url, spec.headers, spec.model, spec.workload,
                        on_record=self._collect)
        self.run.tag = spec.tag  # the driver's tag: request ids read as in one-process runs
        self.run.request_time_ns = spec.request_time_ns
        # deque: append (event loop) and popleft (a Ray poll thread) are thread-safe
        from collections import deque
        self.finished: deque[RequestRecord] = deque()

    def _collect(self, record: RequestRecord) -> None:
        self.finished.append(record)

    def take(self) -> bytes:
        """The records finished since the last call, as one JSON array."""
        batch = [self.finished.popleft() for _ in range(len(self.finished))]
        return orjson.dumps(batch)

    async def measure(self, start_ns: int, flush: Callable[[], None] | None = None) -> dict:
        """Send this share from ``start_ns`` (this process's clock); the worker's own client
        figures (CPU, event-loop lag, send lag) when done."""
        run, share, cfg = self.run, self.spec.share, self.spec.config
        flusher = asyncio.create_task(_every(_FLUSH_S, flush)) if flush else None
        await _sleep_until(start_ns)
        deadline = start_ns + int(cfg.duration_s * 1e9) if cfg.duration_s else None
        monitor = asyncio.create_task(run._watch_lag())
        run.cpu0, run.wall0 = time.process_time(), time.perf_counter()
        if share.offsets_ns is None:
            load = run.closed_loop(share.indices, share.concurrency or 1, False, deadline,
                                   stagger_offset=self.spec.stagger_offset)
        else:
            load = self._open_loop(start_ns, deadline)
        task = asyncio.ensure_future(load)
        try:
            if deadline is None:
                await task
            else:  # --duration bounds the share as it bounds a one-process run: a grace, then
                # the requests still in flight are written as cancelled
                await run._until(task, deadline + int(run.grace_s() * 1e9))
        finally:
            monitor.cancel()
            run.stop_clock()
            run.cancel_in_flight()
            if flusher:
                flusher.cancel()
        figures = run.summary()["client"]
        figures["requests"] = run.stats.total + run.stats.warmup
        figures["stagger"] = run.staggers
        return figures

    async def _open_loop(self, start_ns: int, deadline_ns: int | None) -> None:
        run, share = self.run, self.spec.share
        cap = asyncio.Semaphore(share.concurrency) if share.concurrency else None

        async def capped(index: int, scheduled: int) -> None:
            if cap is None:
                return await run.one(index, scheduled, False, open_loop=True)
            async with cap:  # the wait for a slot stays inside the measured latency
                await run.one(index, scheduled, False, open_loop=True)

        tasks = []
        for index, offset in zip(share.indices, share.offsets_ns or ()):
            scheduled = start_ns + offset
            if deadline_ns is not None and scheduled >= deadline_ns:
                break
            await _sleep_until(scheduled)
            tasks.append(asyncio.create_task(capped(index, scheduled)))
        await asyncio.gather(*tasks)
        run.finalize_all()

    def close(self) -> None:
        self.run.writer.close()
        self.run.client.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


async def _sleep_until(t_ns: int) -> None:
    """Sleep until ``t_ns``, never waking early: uvloop's timers have millisecond resolution and
    fire up to ~1 ms before the asked time, which would send a request before its schedule."""
    delay = t_ns - time.perf_counter_ns()
    if delay > 0:
        await asyncio.sleep(delay / 1e9)
    while time.perf_counter_ns() < t_ns:
        await asyncio.sleep(0)  # yields to the other streams while waiting out the last ~1 ms


async def _every(interval_s: float, fn: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(interval_s)
        fn()


def run_loop(coro_fn: Callable[[], Any], use_uvloop: bool) -> Any:
    factory = None
    if use_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop
            factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro_fn())


def _local_main(conn: Any) -> None:
    """A local worker process: setup, answer pings, run on "go", stream records back."""
    worker = None
    try:
        spec: WorkerSpec = conn.recv()
        worker = WorkerRun(spec)
        conn.send(("ready", host_facts()))
        while True:
            msg = conn.recv()
            if msg[0] == "ping":
                conn.send(("pong", time.perf_counter_ns()))
            elif msg[0] == "go":
                break

        def flush() -> None:
            data = worker.take()
            if data != b"[]":
                conn.send(("records", data))

        figures = run_loop(lambda: worker.measure(msg[1], flush), spec.config.use_uvloop)
        flush()
        conn.send(("done", figures))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the driver went away or stopped us: nothing to report to
    except BaseException as exc:  # reported to the driver, which says which worker and why
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}",
                       traceback.format_exc(limit=5)))
    finally:
        if worker is not None:
            worker.close()


# ----------------------------------------------------------------------------------------------
# The driver side


class WorkerHandle(Protocol):
    name: str

    def wait_ready(self, timeout_s: float) -> dict[str, Any]: ...

    def ping(self) -> int: ...

    def go(self, start_ns: int) -> None: ...

    def stream(self, sink: Callable[[bytes], None]) -> dict[str, Any]: ...

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

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        return self._recv(timeout_s)[1]

    def ping(self) -> int:
        self.conn.send(("ping",))
        return int(self._recv(30)[1])

    def go(self, start_ns: int) -> None:
        self.conn.send(("go", start_ns))

    def stream(self, sink: Callable[[bytes], None]) -> dict[str, Any]:
        while True:
            msg = self._recv()
            if msg[0] == "records":
                sink(msg[1])
            elif msg[0] == "done":
                return msg[1]

    def stop(self) -> None:
        """Stops only the process this handle started (by its PID, via the Process object)."""
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(timeout=5)
        self.conn.close()


@dataclass
class ClockOffset:
    offset_ns: int  # worker clock minus driver clock, as measured
    bound_ns: int  # |true offset - offset_ns| <= bound_ns
    pings: int
    # what is subtracted from the worker's timestamps: 0 on the driver's own kernel, where
    # CLOCK_MONOTONIC is one clock and the measured offset is only the exchange's noise
    applied_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"offset_ns": self.offset_ns, "bound_ns": self.bound_ns, "pings": self.pings,
                "applied_ns": self.applied_ns}


def measure_offset(ping: Callable[[], int], pings: int = _PINGS) -> ClockOffset:
    """NTP-style: the exchange with the shortest round trip bounds the offset best."""
    best: tuple[int, int] | None = None
    for _ in range(pings):
        t0 = time.perf_counter_ns()
        tw = ping()
        t1 = time.perf_counter_ns()
        rtt = t1 - t0
        if best is None or rtt < best[1]:
            best = (tw - (t0 + t1) // 2, rtt)
    assert best is not None
    return ClockOffset(best[0], (best[1] + 1) // 2, pings)


def shift_record(record: RequestRecord, offset_ns: int) -> RequestRecord:
    """A worker's record moved onto the driver's clock."""
    if offset_ns:
        for name in _TIME_FIELDS:
            value = getattr(record, name)
            if value:
                setattr(record, name, value - offset_ns)
        record.chunk_ns = [t - offset_ns for t in record.chunk_ns]
    return record


@dataclass
class WorkerState:
    index: int
    handle: Any
    share: Share
    facts: dict[str, Any] = field(default_factory=dict)
    clock: ClockOffset | None = None
    clock_after: ClockOffset | None = None
    figures: dict[str, Any] | None = None
    error: str | None = None
    received: int = 0
    thread: threading.Thread | None = None

    def report(self) -> dict[str, Any]:
        fig = self.figures or {}
        lost = (self.share.size - self.received) if self.error and self.share.size else None
        return {"worker": self.index, **self.facts, "requests": self.received,
                "share": self.share.size, "concurrency": self.share.concurrency,
                "cpu_s": fig.get("cpu_s"), "wall_s": fig.get("wall_s"),
                "cpu_utilization": fig.get("cpu_utilization"),
                "loop_lag_ms": fig.get("loop_lag_ms", {}),
                "send_lag_p99_ms": fig.get("send_lag_p99_ms"),
                "event_loop": fig.get("event_loop"),
                "clock": self.clock.to_dict() if self.clock else None,
                "clock_after": self.clock_after.to_dict() if self.clock_after else None,
                "stagger": fig.get("stagger"),
                "error": self.error, "requests_not_returned": lost}


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


def run_workers(config: BenchConfig, workers: int, *, backend: str = "local",
                ray_address: str | None = None, observers: Iterable[RunObserver] = (),
                on_record: OnRecord | None = None) -> BenchResult:
    """``run_bench`` with the load split over ``workers`` processes (``backend`` local | ray).
    The result's summary has a ``workers`` list; ``summary["workers_failed"]`` names any that
    died (their finished records are in the run)."""
    return run_loop(lambda: arun_workers(config, workers, backend=backend,
                                         ray_address=ray_address, observers=observers,
                                         on_record=on_record), config.use_uvloop)


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
    tokenizer = await asyncio.to_thread(pick_tokenizer, config, base_url, model, headers)
    await asyncio.to_thread(check_lengths, config, base_url, headers)
    workload = await asyncio.to_thread(build_workload, config.workload, prompt_count(config),
                                       tokenizer, config.seed)
    shares = plan_shares(config, workers, len(workload.prompts))
    run = _Run(config, base_url, headers, model, workload, on_record)
    manifest = make_manifest(config, base_url, model, workload, run.tag)
    manifest["workers"] = {"backend": backend, "count": workers,
                           "split": "closed: slots even, requests by slots" if config.rate is None
                           else "open: global arrival schedule thinned per worker"}
    run.writer.write_manifest(manifest)
    states: list[WorkerState] = []
    observers = list(observers)
    started: list[RunObserver] = []
    ctx = None
    try:
        if config.warmup:  # once, by the driver, before any worker sends
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
        manifest["workers"]["clocks"] = [{"worker": s.index, **s.facts, **s.clock.to_dict()}
                                         for s in states if s.clock]
        run.writer.write_manifest(manifest)
        for obs in observers:
            await obs.start(ctx)
            started.append(obs)
        await _drive(run, states, start_ns)
        await asyncio.to_thread(_clocks_after, states)
        manifest["workers"]["clocks_after"] = [
            {"worker": s.index, **s.clock_after.to_dict()} for s in states if s.clock_after]
        run.writer.write_manifest(manifest)
    finally:
        for state in states:
            with contextlib.suppress(Exception):
                state.handle.stop()
        for obs in started:
            with contextlib.suppress(Exception):  # one observer's failure must not lose data
                await obs.stop(ctx)
        summary = run.summary()
        summary["client"] = merged_client_figures([s.report() for s in states], summary)
        summary["workers"] = [s.report() for s in states]
        summary["workers_failed"] = [f"worker {s.index}: {s.error}" for s in states if s.error]
        summary["load"]["workers"] = {"backend": backend, "count": workers}
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
            same_clock = state.facts.get("boot_id") and state.facts["boot_id"] == boot_id()
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


async def _drive(run: _Run, states: list[WorkerState], start_ns: int) -> None:
    """Send "go", then merge what the workers stream back until every one finished or died."""
    inbox: queue.SimpleQueue[tuple[WorkerState, bytes]] = queue.SimpleQueue()

    def follow(state: WorkerState) -> None:
        try:
            state.figures = state.handle.stream(lambda data: inbox.put((state, data)))
        except WorkerDied as exc:
            state.error = str(exc)
        except Exception as exc:  # a backend error: still "this worker, this reason"
            state.error = f"{type(exc).__name__}: {exc}"

    for state in states:
        assert state.clock is not None
        state.handle.go(start_ns + state.clock.applied_ns)
        state.thread = threading.Thread(target=follow, args=(state,), daemon=True,
                                        name=f"latscope-follow-{state.index}")
        state.thread.start()
    while True:
        alive = any(s.thread and s.thread.is_alive() for s in states)
        while True:
            try:
                state, data = inbox.get_nowait()
            except queue.Empty:
                break
            for item in orjson.loads(data):
                run._finished(shift_record(RequestRecord.from_dict(item), state.clock.applied_ns))
                state.received += 1
        if not alive:
            return
        await asyncio.sleep(0.05)


def merged_client_figures(workers: list[dict[str, Any]], summary: dict[str, Any]) -> dict:
    """The client's own cost over all workers: CPU summed, the busiest worker's utilisation and
    the worst loop lag (the worst worker bounds the timestamp error), warnings per worker."""
    out_tokens = summary["tokens"]["output_total"]
    cpu = sum(w["cpu_s"] or 0.0 for w in workers)
    wall = max((w["wall_s"] or 0.0 for w in workers), default=0.0)
    util = max((w["cpu_utilization"] or 0.0 for w in workers), default=None)
    lags = [w["loop_lag_ms"] for w in workers if w.get("loop_lag_ms")]
    worst = max(lags, key=lambda d: d.get("p99") or 0.0, default={})
    send = summary.get("send_lag_ms") or {}
    send_p99 = max((w["send_lag_p99_ms"] or 0.0 for w in workers), default=None)
    figures = {"cpu_s": cpu, "wall_s": wall, "cpu_utilization": util,
               "cpu_us_per_output_token": cpu / out_tokens * 1e6 if out_tokens else None,
               "loop_lag_ms": {k: worst.get(k) for k in ("p50", "p99")} if worst
               else distribution([], (50, 99)),
               "send_lag_p99_ms": send_p99 if send_p99 is not None else send.get("p99"),
               "event_loop": next((w["event_loop"] for w in workers if w.get("event_loop")), None),
               "workers": len(workers)}
    warnings = []
    for w in workers:
        if w.get("cpu_s") is None:
            continue
        one = {"cpu_utilization": w["cpu_utilization"], "loop_lag_ms": w["loop_lag_ms"],
               "send_lag_p99_ms": w["send_lag_p99_ms"]}
        warnings += [f"worker {w['worker']}: {text}" for text in client_warnings(one, summary)]
    for w in workers:
        if w.get("error"):
            warnings.append(f"worker {w['worker']} did not finish: {w['error']}")
    figures["warnings"] = warnings
    return figures
