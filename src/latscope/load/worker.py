"""The worker side of a multi-process bench run: what runs in a local worker process or a Ray
actor (``latscope.load.workers`` is the driver side)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import itertools
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from latscope.errors import LatscopeError, OutputError
from latscope.load.config import BenchConfig
from latscope.load.prepare import ramp_allowance
from latscope.load.runner import _forget, _Run
from latscope.load.shares import Share
from latscope.load.workload import Prompt, Workload
from latscope.model import RequestRecord
from latscope.rundir import RunWriter, record_line
from latscope.stats import RunStats

_FLUSH_S = 0.1  # how often a worker appends (or sends back) its finished records


class WorkerDied(LatscopeError):
    """A worker stopped before finishing its share (the message says which and why)."""


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


class _LinesForTheDriver(RunWriter):
    """A worker's writer: each finished record's ``requests.jsonl`` line, kept until the
    worker's flush takes it (to append it to the run's file, or send it to the driver). A
    worker once wrote a scratch file nobody read and serialised each record again for the
    driver: ~10 us of its ~55 a response at its ceiling."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        # a deque: append (the event loop) and popleft (a Ray poll thread) are thread-safe
        self._lines: deque[bytes] = deque()

    def append(self, record: RequestRecord, line: bytes | None = None) -> None:
        self._lines.append(line or record_line(record))

    def take(self) -> bytes:
        """The lines kept since the last call (JSON Lines; b"" when none)."""
        return b"".join([self._lines.popleft() for _ in range(len(self._lines))])


@dataclass(frozen=True, slots=True)
class HostFacts:
    """Where a worker runs, sent when it is ready: its boot id tells whether it shares the
    driver's clock."""

    host: str
    pid: int
    boot_id: str | None
    node_id: str | None = None  # a Ray actor's node

    def fields(self) -> dict[str, str | int | None]:
        """As the manifest and summary.json record a worker (node_id only for Ray's)."""
        out: dict[str, str | int | None] = {"host": self.host, "pid": self.pid,
                                            "boot_id": self.boot_id}
        if self.node_id is not None:
            out["node_id"] = self.node_id
        return out


@dataclass(slots=True)
class WorkerResult:
    """What a worker sends back at its end: its client figures (summary.json's ``client`` keys,
    the requests it sent and the stagger its closed loop drew) and its share's statistics."""

    figures: dict[str, Any]
    stats: RunStats
    groups: dict[str, RunStats] | None  # per group, where the workload has groups


def host_facts() -> HostFacts:
    return HostFacts(socket.gethostname(), os.getpid(), boot_id())


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
                        on_record=None)
        self.run.writer.close()
        self.run.writer = self.lines = _LinesForTheDriver(self.scratch)
        self.run.tag = spec.tag  # the driver's tag: request ids read as in one-process runs
        self.run.request_time_ns = spec.request_time_ns
        # asked to stop (the driver was interrupted): the load ends, the share's figures and
        # statistics still go back (``stop``)
        self.stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._load: asyncio.Future[None] | None = None
        # this worker's own prompts (the workload came as a recipe), the first before the start
        # (its stagger's ramp on top of a closed loop's measured ones)
        size = spec.share.size
        ramp = ramp_allowance(spec.share.concurrency) if spec.share.offsets_ns is None else 0
        order: Iterable[int] = spec.share.indices
        if size is not None:  # an -n share: built once, none past it (the order has no end)
            order = itertools.islice(order, size + ramp)
        spec.workload.prompts.prebuild(order, None if size is None else size + ramp)

    def take(self) -> bytes:
        """The records finished since the last call, as their ``requests.jsonl`` lines."""
        return self.lines.take()

    async def measure(self, start_ns: int, flush: Callable[[], None] | None = None
                      ) -> WorkerResult:
        """Send this share from ``start_ns`` (this process's clock); the worker's own client
        figures (CPU, event-loop lag, send lag) when done."""
        run, share, cfg = self.run, self.spec.share, self.spec.config
        flusher = asyncio.create_task(_every(_FLUSH_S, flush)) if flush else None
        await _sleep_until(start_ns)
        deadline = start_ns + int(cfg.duration_s * 1e9) if cfg.duration_s else None
        run.pace.start()  # the collector paced by finished requests (load.gcpace)
        monitor = asyncio.create_task(run._watch_lag())
        run.cpu0, run.wall0 = time.process_time(), time.perf_counter()
        if share.offsets_ns is None:
            # every worker's slots hold from its own ramp's end: its ramp is warm-up
            run.deadline_ns = deadline
            load = run.closed_loop(share.indices, share.concurrency or 1, False,
                                   None if deadline is None else deadline - start_ns,
                                   stagger_offset=self.spec.stagger_offset,
                                   measured=share.measured)
        else:
            load = self._open_loop(start_ns, deadline)
        task = self._load = asyncio.ensure_future(load)
        self._loop = asyncio.get_running_loop()
        if self.stopping:  # asked before the load began
            task.cancel()
        try:
            if deadline is None:
                await task
            else:  # --duration bounds the share as it bounds a one-process run: a grace, then
                # the requests still in flight are written as cancelled
                await run._until(task, deadline + int(run.grace_s() * 1e9))
        except asyncio.CancelledError:
            if not self.stopping or not task.cancelled():
                raise
            # stopped by the driver: what is in flight is written as cancelled (below), and
            # the figures go back as at a normal end
        finally:
            run.pace.stop()
            monitor.cancel()
            run.stop_clock()
            run.cancel_in_flight()
            # closed here, on the loop that owns the connections: after run_loop returns the
            # loop is closed and a transport's close() raises "Event loop is closed"
            run.client.close()
            if flusher:
                flusher.cancel()
        figures = run.summary()["client"]
        figures["requests"] = run.stats.total + run.stats.warmup
        figures["stagger"] = run.staggers
        # this share's statistics, for the driver to merge (it writes the lines, counts none)
        return WorkerResult(figures, run.stats, run.groups)

    def stop(self) -> None:
        """From any thread: end the load now; ``measure`` then returns as at its end."""
        self.stopping = True
        loop, load = self._loop, self._load
        if loop is not None and load is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the run ended already
                loop.call_soon_threadsafe(load.cancel)

    async def _open_loop(self, start_ns: int, deadline_ns: int | None) -> None:
        run, share = self.run, self.spec.share
        cap = asyncio.Semaphore(share.concurrency) if share.concurrency else None

        async def capped(index: int, scheduled: int, prepared: tuple[Prompt, bytes]) -> None:
            if cap is None:
                return await run.one(index, scheduled, False, prepared, open_loop=True)
            async with cap:  # the wait for a slot stays inside the measured latency
                await run.one(index, scheduled, False, prepared, open_loop=True)

        tasks: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []
        for index, offset in zip(share.indices, share.offsets_ns or ()):
            scheduled = start_ns + offset
            if deadline_ns is not None and scheduled >= deadline_ns:
                break
            prepared = run.prepare(index)  # before its time comes, not inside its send lag
            await _sleep_until(scheduled)
            task = asyncio.create_task(capped(index, scheduled, prepared))
            tasks.add(task)  # finished tasks leave the set: memory stays with what is in flight
            task.add_done_callback(functools.partial(_forget, tasks, failures))
        await asyncio.gather(*tasks)
        if failures:
            raise failures[0]
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


def _listen_for_stop(conn: Any, worker: WorkerRun) -> None:
    """A local worker's ear during its run (the run's own thread only sends, this one only
    receives, on the two directions of the pipe): the driver's "stop" ends the run, and so
    does the driver's end (its side of the pipe closed: killed). A worker whose driver died
    once went on loading the server until its share ended (~2 min in a test), its records
    sent nowhere."""
    with contextlib.suppress(EOFError, OSError):
        while conn.recv()[0] != "stop":
            pass
    worker.stop()


@contextlib.contextmanager
def _records_sink(conn: Any, worker: WorkerRun,
                  path: str | None) -> Iterator[Callable[[bytes], None]]:
    """Where a local worker's batches of lines go: appended to the run's ``requests.jsonl``
    itself where the driver gave its path (``workers._appends_itself``), else sent to the
    driver. A write that fails (a full disk) stops this worker's load as it stops a
    one-process run (``RequestFlow.one`` raises the writer's failure); the driver reports the
    worker failed with that cause."""
    if path is None:
        yield lambda data: conn.send(("records", data))
        return
    writer = worker.run.writer

    def append(data: bytes) -> None:
        if writer.failure is not None:
            return
        try:
            write_whole(records, data)
        except OSError as exc:
            writer.failure = OutputError(f"cannot write {path}: {exc.strerror or exc}; the "
                                         "records written before are kept")

    with open(path, "ab", buffering=0) as records:  # unbuffered, O_APPEND
        yield append


def write_whole(records: Any, data: bytes) -> None:
    """``data`` written to the unbuffered file ``records`` in full: one write() a batch (lines
    from other processes appended to the same file land before or after it, not inside, on a
    local file system); another only where the kernel took part of it (a signal)."""
    view = memoryview(data)
    while view:
        view = view[records.write(view):]


def _local_main(conn: Any) -> None:
    """A local worker process: setup, answer pings, run on "go", stream records back."""
    worker = None
    try:
        # a terminal's Ctrl-C reaches the whole process group: the driver, not each worker,
        # handles it (it asks every worker to stop and send its statistics back)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        spec: WorkerSpec = conn.recv()
        worker = WorkerRun(spec)
        conn.send(("ready", host_facts()))
        while True:
            msg = conn.recv()
            if msg[0] == "ping":
                conn.send(("pong", time.perf_counter_ns()))
            elif msg[0] == "go":
                break
        threading.Thread(target=_listen_for_stop, args=(conn, worker), daemon=True,
                         name="latscope-worker-stop").start()

        with _records_sink(conn, worker, msg[2] if len(msg) > 2 else None) as put:

            def flush() -> None:
                data = worker.take()
                if data:
                    put(data)

            try:
                figures = run_loop(lambda: worker.measure(msg[1], flush),
                                   spec.config.use_uvloop)
            finally:  # the last lines, those a failed load wrote on its way out included
                with contextlib.suppress(OSError):  # (the driver gone: nobody to send them)
                    flush()
        if worker.run.writer.failure is not None:  # its last lines could not be written
            raise worker.run.writer.failure
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
