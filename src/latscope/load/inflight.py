"""A request's way through a run: sent, its finished response queued, parsed a slice of an
event-loop turn at a time, counted and written (``latscope.load.runner._Run`` is the rest of the
run: the loops that call ``one``, the clocks, the summary).

The queue is the hot path's other half: a slot hands its finished response over and sends its
next request at once; parsing waits for a quiet moment of the loop, within the bounds below.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from typing import Any, Callable

from latscope.errors import LatscopeError, OutputError
from latscope.load.client import StreamingClient
from latscope.load.config import BenchConfig
from latscope.load.gcpace import CollectorPace
from latscope.load.prepare import request_body
from latscope.load.response import finalize
from latscope.load.workload import Prompt, Workload
from latscope.model import ErrorKind, RequestRecord
from latscope.rundir import RunWriter
from latscope.stats import Gaps, RunStats

# Finished responses wait to be parsed, at most _FINALIZE_SLICE_NS of parsing per loop turn (and
# at least one response), so a burst of them never delays the timestamps of the others by more
# than that. When responses end faster than the client parses them (a zero-delay server) the
# queue must not grow without bound (it once held 10,000 bodies, 22 MB, at concurrency 64); it
# was then parsed all at once past 16 MiB, which blocked the loop for ~150 ms at c=256 (event-loop
# lag p99 357 ms). Now past _FINALIZE_BACKLOG_BYTES a closed-loop slot waits before its next send
# until the queue is half as long (backpressure: the client is the bottleneck, and its figures say
# so); only past _FINALIZE_OPEN_LOOP_BYTES (open loops, whose sends follow a schedule) is the
# queue parsed as responses end. The bound was 16 MiB; at 1 MiB the event-loop lag p99 at c=256
# is ~6 ms instead of ~15 and the queue's peak ~9 MB instead of ~25, at the same CPU per token on
# a quiet host and less on two busy ones (where 16-25 MB of queue likely fell out of the core's
# cache: docs/bench.md). A real vLLM's responses end slower than they are parsed here: on an H200
# at c=256 its queue peaked at 0.8 MB, so its slots seldom wait.
_FINALIZE_SLICE_NS = 1_000_000
_FINALIZE_BACKLOG_BYTES = 1 << 20
_FINALIZE_OPEN_LOOP_BYTES = 64 << 20


class Gate:
    """``asyncio.Event``'s ``set``, ``clear``, ``is_set`` and ``wait``, for the slots that wait
    on the queue: its loop is looked up once. ``Event.wait`` looks up the running loop on every
    call, which on Python 3.11 makes a ``getpid()`` system call: 4% of the client's CPU at its
    ceiling on the dev box, where most sends at c=256 wait once."""

    __slots__ = ("_open", "_waiters", "_loop")

    def __init__(self) -> None:
        self._open = False
        self._waiters: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def is_set(self) -> bool:
        return self._open

    def set(self) -> None:
        self._open = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():  # (its task was cancelled)
                waiter.set_result(None)

    def clear(self) -> None:
        self._open = False

    async def wait(self) -> None:
        if self._open:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter


class RequestFlow:
    """Sends one request and takes its response through the finished-response queue; the
    state is ``_Run``'s (set in its ``__init__``)."""

    config: BenchConfig
    model: str
    workload: Workload
    on_record: Callable[[RequestRecord], None] | None
    client: StreamingClient
    trace: bool  # a W3C trace id per request (--trace-requests)
    writer: RunWriter
    tag: str
    stats: RunStats
    groups: dict[str, RunStats] | None
    in_flight: dict[int, RequestRecord]
    to_finalize: deque[tuple[RequestRecord, Any]]
    backlog_bytes: int
    backlog_peak: int
    backpressure_waits: int
    drained: Gate
    pace: CollectorPace
    finalizing: bool
    loop: asyncio.AbstractEventLoop | None  # the run's, once looked up (see Gate)
    # what stops the sends: a response latscope could not read, or the caller's on_record failed
    failure: Exception | None

    def prepare(self, index: int) -> tuple[Prompt, bytes]:
        """Request ``index``'s prompt (taken from the workload: built before the run or as it
        goes) and the body that sends it."""
        prompt = self.workload.prompts.take(index)
        return prompt, request_body(self.config, self.model, prompt)

    async def one(self, index: int, scheduled_ns: int, warmup: bool,
                  prepared: tuple[Prompt, bytes] | None = None, open_loop: bool = False) -> None:
        self.stop_if_failed()
        prompt, body = prepared or self.prepare(index)
        record = RequestRecord(index=index, request_id=f"latscope-{self.tag}-{index}",
                               scheduled_ns=scheduled_ns, warmup=warmup, open_loop=open_loop,
                               prompt_tokens=prompt.prompt_tokens,
                               expected_output_tokens=prompt.output_tokens, group=prompt.group,
                               trace_id=f"{random.getrandbits(128):032x}" if self.trace else None)
        self.in_flight[index] = record
        exchange = await self.client.execute(body, record)
        del self.in_flight[index]
        self.to_finalize.append((record, exchange))
        self.backlog_bytes += exchange.size
        self.backlog_peak = max(self.backlog_peak, self.backlog_bytes)
        while self.backlog_bytes > _FINALIZE_OPEN_LOOP_BYTES:
            self._finalize_next()
        if not self.finalizing:
            self.finalizing = True
            if self.loop is None:
                self.loop = asyncio.get_running_loop()
            self.loop.call_soon(self._finalize_one)
        if self.backlog_bytes > _FINALIZE_BACKLOG_BYTES and not open_loop:
            self.backpressure_waits += 1
            self.drained.clear()
            await self.drained.wait()
            self.stop_if_failed()

    def stop_if_failed(self) -> None:
        """Raises what stops the sends: the run directory cannot be written, a response could
        not be read (a latscope bug), or the caller's ``on_record`` raised."""
        if self.writer.failure is not None:
            raise self.writer.failure
        if self.failure is not None:
            raise self.failure

    def _finalize_one(self) -> None:
        """Parse finished responses for at most ``_FINALIZE_SLICE_NS`` of this event-loop turn,
        so that parsing a burst of them never holds back the receive timestamps of the requests
        still streaming by more than that."""
        stop = time.perf_counter_ns() + _FINALIZE_SLICE_NS
        try:
            while self.to_finalize:  # (finalize_all may have emptied it meanwhile)
                self._finalize_next()
                if time.perf_counter_ns() >= stop:
                    break
        except OutputError:  # a callback's error would only be logged: the sends stop on it
            self.finalizing = False
            self.drained.set()
            return
        if self.backlog_bytes <= _FINALIZE_BACKLOG_BYTES // 2:
            self.drained.set()
        if self.to_finalize:
            (self.loop or asyncio.get_running_loop()).call_soon(self._finalize_one)
        else:
            self.finalizing = False

    def _finalize_next(self) -> None:
        record, exchange = self.to_finalize.popleft()
        self.backlog_bytes -= exchange.size
        try:
            finalize(record, exchange, self.config.stream)
        except Exception as exc:  # a reader's bug: in a loop callback it would only be logged,
            # the queue left undrained and the slots waiting on it waiting for ever
            self._not_read(record, exc)
        self._finished(record)

    def _not_read(self, record: RequestRecord, exc: Exception) -> None:
        """A response the readers failed on: written as an error, and the run stops with it."""
        cause = f"{type(exc).__name__}: {exc}"
        record.error_kind = ErrorKind.MALFORMED.value
        record.error = f"latscope could not read this response ({cause})"
        if self.failure is None:
            self.failure = LatscopeError(
                f"reading the response to request {record.index} failed, a latscope bug "
                f"({cause}); please report it")
            self.failure.__cause__ = exc

    def finalize_all(self) -> None:
        while self.to_finalize:
            self._finalize_next()
        self.drained.set()

    def _finished(self, record: RequestRecord, line: bytes | None = None, *,
                  count: bool = True) -> None:
        """A record done: counted (unless ``count`` is False: a worker's, in the statistics
        it sends at its end), written (as ``line`` where the caller has its
        ``requests.jsonl`` line already: a worker's record on the driver's clock)."""
        if count:
            self.count(record)
        self.pace.finished()
        self.writer.append(record, line)
        if self.on_record is not None:
            try:
                self.on_record(record)
            except Exception as exc:  # in a loop callback it would only be logged, and the run
                # go on without what the caller needed: it stops the sends, and run_bench
                # raises it once every record gathered so far is written
                if self.failure is None:
                    self.failure = exc

    def count(self, record: RequestRecord, gaps: Gaps | None = None) -> None:
        """A record in the run's statistics (and its group's); ``gaps``: its ITL gaps where
        the caller read them from its line without its token times (``chunk_ns`` empty)."""
        self.stats.add(record, gaps)
        if self.groups is not None:
            group = record.group or ""
            if group not in self.groups:
                self.groups[group] = RunStats(self.config.percentiles)
            self.groups[group].add(record, gaps)

    def cancel_in_flight(self) -> None:
        """Requests still in flight when the run stops are written as cancelled, not dropped."""
        self.finalize_all()
        for record in list(self.in_flight.values()):
            record.error_kind = ErrorKind.CANCELLED.value
            record.error = record.error or "run stopped while the request was in flight"
            self._finished(record)
        self.in_flight.clear()
