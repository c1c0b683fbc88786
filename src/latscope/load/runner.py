"""Drives one load run: prepare, warm up, measure, write everything as it happens, summarise.

The arrival schedule and the run's first prompts are prepared before the first measured request
(an ordinary run's every prompt; a long one's are built as it goes, ``load.promptsource``); each
request body is built from its prompt just before it is sent (a few microseconds; keeping every
record and pre-built body cost ~6 KB a request). A closed loop keeps ``concurrency`` requests in
flight, each scheduled the moment a slot frees (the slots' first sends staggered over one request
time, ``latscope.load.stagger``), and measures latency from the actual send; an open loop sends
on a precomputed Poisson/gamma schedule and measures every latency from the *scheduled* time, so
the client's own lag is counted (``latscope.stats.origin_ns`` is the one definition).
Either way the send lag is reported separately (with event-loop lag, client CPU and run-queue
wait), with a warning when the client is the bottleneck. Finished records go to
``requests.jsonl`` and into constant-size accumulators (``RunStats``), never into a list: memory
grows by 16 bytes a request plus 4 per ITL gap (capped, ``docs/metrics.md``). SIGTERM stops a run
as Ctrl-C does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import time
from array import array
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from latscope.load.client import StreamingClient, check_headers
from latscope.load.config import BenchConfig
from latscope.load.gcpace import CollectorPace
from latscope.load.inflight import Gate
from latscope.load.offcpu import RunQueueClock
from latscope.load.openloop import OpenLoop, _forget  # noqa: F401 (workers take it here)
from latscope.load.prepare import (
    check_lengths,
    discover_model,
    make_manifest,
    pick_tokenizer,
    prompt_count,
    request_headers,
    split_url,
)
from latscope.load.response import STREAM_PARSER
from latscope.load.stagger import Feed, Stagger
from latscope.load.summary import (  # noqa: F401 (callers take them from here)
    add_staggers,
    client_warnings,
    compose_summary,
    rebuild_summary,
    run_failure,
)
from latscope.load.workload import Workload, build_workload
from latscope.model import RequestRecord, RunContext, RunObserver
from latscope.rundir import RunWriter, default_run_dir, iter_records, read_run
from latscope.stats import RunStats, distribution

_LAG_INTERVAL_S = 0.01
_DURATION_GRACE_MAX_S = 30.0  # in-flight requests may finish this long after --duration (k6's)
OnRecord = Callable[[RequestRecord], None]


class RunInterrupted(KeyboardInterrupt):
    """A signal (SIGTERM) stopped the run; everything gathered so far is on disk."""

    def __init__(self, signum: int, run_dir: Path | None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.run_dir = signum, run_dir


@dataclass
class BenchResult:
    run_dir: Path
    summary: dict[str, Any]
    config: BenchConfig
    manifest: dict[str, Any]

    @property
    def records(self) -> list[RequestRecord]:
        """The run's records, read back from ``requests.jsonl`` (the run keeps none in memory),
        every one with its token times at once (~9 kB a 256-token record): for tests and
        small runs; a pass over a long run's records takes ``iter_records``."""
        return read_run(self.run_dir)[1]

    def iter_records(self, token_times: bool = False) -> Iterator[RequestRecord]:
        """The run's records one at a time, without their token times unless asked."""
        return iter_records(self.run_dir, token_times=token_times)


def run_bench(config: BenchConfig, observers: Iterable[RunObserver] = (),
              on_record: OnRecord | None = None) -> BenchResult:
    """Synchronous entry point: owns its event loop (uvloop when installed and enabled).
    Raises ``RunInterrupted`` after SIGTERM and KeyboardInterrupt after Ctrl-C, in both cases
    with every finished request, the in-flight ones as cancelled and the summary on disk."""
    factory = None
    if config.use_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop
            factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        result, signum = runner.run(_stoppable(arun_bench(config, observers, on_record)))
    if signum:
        raise RunInterrupted(signum, config.output_dir)
    return result


async def _stoppable(coro: Any) -> tuple[Any, int]:
    """Runs ``coro``; SIGTERM cancels it as asyncio.Runner does on SIGINT, so its ``finally``
    writes the summary. A second SIGTERM gets the default action (ends the process)."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    got: list[int] = []
    previous = signal.getsignal(signal.SIGTERM)

    def on_term() -> None:
        got.append(signal.SIGTERM)
        loop.remove_signal_handler(signal.SIGTERM)  # a second SIGTERM: the default action
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread: no handler
        return await coro, 0
    try:
        return await coro, 0
    except asyncio.CancelledError:
        if got:
            task.uncancel()
            return None, got[0]
        raise
    finally:
        if not got:
            loop.remove_signal_handler(signal.SIGTERM)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)  # whatever the caller had installed


async def arun_bench(config: BenchConfig, observers: Iterable[RunObserver] = (),
                     on_record: OnRecord | None = None) -> BenchResult:
    config.validate()
    base_url, credentials = split_url(config.url)
    headers = request_headers(config.api_key, credentials)
    check_headers(headers)  # before any request, setup ones included
    model = config.model or await asyncio.to_thread(discover_model, base_url, headers)
    assert model is not None  # discover_model raises where the server lists no model
    tokenizer = await asyncio.to_thread(pick_tokenizer, config, base_url, model, headers)
    await asyncio.to_thread(check_lengths, config, base_url, headers)
    workload = await asyncio.to_thread(build_workload, config.workload, prompt_count(config),
                                       tokenizer, config.seed, config.size_seed)
    # indices are sent in order from 0 (warm-up first): the first are built before the run.
    # Only a closed-loop --duration run has no last index; building past the last index of the
    # others doubled an -n run's prompt building (the refill kept the unsent half topped up).
    count = prompt_count(config)
    order = itertools.count() if config.rate is None and not config.num_requests else range(count)
    await asyncio.to_thread(workload.prompts.prebuild, order, count)
    run = _Run(config, base_url, headers, model, workload, on_record)
    manifest = make_manifest(config, base_url, model, workload, run.tag)
    run.writer.write_manifest(manifest)
    observers = list(observers)
    started: list[RunObserver] = []
    contexts: list[RunContext] = []

    async def begin_measurement() -> None:
        ctx = RunContext(base_url=base_url, run_dir=run.writer.run_dir, headers=headers,
                         start_ns=time.perf_counter_ns(), start_wall=time.time())
        contexts.append(ctx)
        manifest.update(start_ns=ctx.start_ns, start_wall=ctx.start_wall)
        run.writer.write_manifest(manifest)
        for obs in observers:
            await obs.start(ctx)
            started.append(obs)

    run.pace.start()  # the collector paced by finished requests (load.gcpace)
    try:
        # the connections the load will hold, opened before it starts (not measured)
        await run.client.preconnect(min(config.concurrency or 0, 4096))
        try:
            await _load(run, config, manifest, begin_measurement)
        finally:
            run.stop_clock()
            for obs in started:
                with contextlib.suppress(Exception):  # one observer's failure must not lose data
                    await obs.stop(contexts[0])
    finally:
        run.pace.stop()
        run.cancel_in_flight()
        summary = run.summary()
        manifest["stagger"] = run.staggers  # what the closed loops drew (also in the summary)
        run.writer.write_manifest(manifest)
        run.writer.write_summary(summary)
        run.writer.close()
        run.client.close()
    return BenchResult(run.writer.run_dir, summary, config, manifest)


async def _load(run: _Run, config: BenchConfig, manifest: dict[str, Any],
                begin: Callable[[], Any]) -> None:
    """The warm-up and the measured requests; ``begin`` starts the measurement (observers).

    A closed loop's measurement begins at its first measured send: its warm-up and its
    stagger's ramp (``load.stagger``) flow into the measured requests without a gap (stopping
    between them would start the measured run with a burst of ``concurrency`` requests at
    once, whose queue is the burst's, not the load's); with --duration a warm-up is sent
    first, waited for. An open loop's warm-up is the first requests of its arrivals, at the
    rate: a warm-up one at a time (what an uncapped open loop had) warms nothing a load needs,
    and 720 of them took 2.5 minutes on the H200 before a 15 s run."""
    if config.rate is None:
        if config.warmup and config.duration_s:
            await run.closed_loop(range(config.warmup), min(config.concurrency or 1,
                                                             config.warmup), warmup=True)
        elif config.warmup:
            manifest["warmup_mode"] = "continuous: warm-up requests flow into measured ones"
        await run.measure(begin=begin)
    elif config.warmup:
        manifest["warmup_mode"] = "continuous: the first arrivals, at the rate"
        await run.measure(begin=begin)
    else:
        await begin()
        await run.measure()


class _Once:
    """Runs an async function once; every caller waits until it has run."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.task: asyncio.Future[Any] | None = None
        self.ran = False  # callers skip the await from then on (~1 us a request)

    async def run(self) -> None:
        if self.task is None:
            self.task = asyncio.ensure_future(self.fn())
        await asyncio.shield(self.task)
        self.ran = True


class _Run(OpenLoop):
    """The mutable state of one run."""

    def __init__(self, config: BenchConfig, base_url: str, headers: dict[str, str], model: str,
                 workload: Workload, on_record: OnRecord | None) -> None:
        self.config, self.model, self.workload, self.on_record = config, model, workload, on_record
        path = "/v1/chat/completions" if config.endpoint == "chat" else "/v1/completions"
        self.client = StreamingClient(base_url, path, headers, config.request_timeout_s,
                                      max_response_bytes=config.max_response_bytes,
                                      trace=config.trace_requests)
        self.trace = config.trace_requests  # a trace id drawn per send (~0.3 us)
        self.writer = RunWriter(config.output_dir or default_run_dir())
        self.tag = f"{time.time_ns():x}"[-8:]
        self.stats = RunStats(config.percentiles, config.slo)
        self.pace = CollectorPace(config.concurrency)
        # per mix entry / shared-prefix group, kept only when the workload has more than one
        self.groups: dict[str, RunStats] | None = (
            {} if len(workload.prompts.group_names()) > 1 else None)
        self.in_flight: dict[int, RequestRecord] = {}
        self.to_finalize: deque[tuple[RequestRecord, Any]] = deque()
        self.backlog_bytes = 0  # body bytes in to_finalize
        self.backlog_peak = 0
        self.backpressure_waits = 0
        self.drained = Gate()
        self.finalizing = False
        self.loop = None
        self.failure = None
        self.lag_ms = array("f")
        # one request's time, measured by a closed loop's first request: the next closed loop
        # staggers its slots by it without a pilot request of its own
        self.request_time_ns: int | None = None
        self.staggers: list[dict[str, Any]] = []  # what each closed loop drew, for the summary
        # no closed-loop send starts past this (--duration; set when the measurement starts)
        self.deadline_ns: int | None = None
        self.measuring = asyncio.Event()  # the measurement started (``measure``'s clocks)
        self.cpu0 = self.wall0 = self.cpu_s = self.wall_s = 0.0
        self.off_cpu = RunQueueClock()  # the loop ready to run while another process ran

    async def closed_loop(self, indices: Iterable[int], concurrency: int, warmup: bool,
                          window_ns: int | None = None, *, warm_below: int = 0,
                          begin: Callable[[], Any] | None = None,
                          stagger_offset: float = 0.0, measured: int | None = None) -> None:
        """``concurrency`` slots, each sending the next index as soon as its last one ended,
        until ``measured`` measured requests were sent (None: until the indices run out or
        ``deadline_ns`` passed; ``window_ns``, that time, caps the stagger). Indices below
        ``warm_below``, and the sends of the stagger's ramp (before every slot has sent), are
        warm-up requests; the first slot to reach a measured one runs ``begin`` (the
        measurement's start) once, and the others wait for it."""
        feed = Feed(indices, warm_below=warm_below, warmup=warmup, measured=measured)
        gate = _Once(begin) if begin is not None else None
        stagger = Stagger(concurrency, self.request_time_ns, window_ns, stagger_offset)
        spread = self.config.stagger

        async def slot(i: int) -> None:
            if spread:
                await stagger.wait(i)
            stagger.slot_starts()  # the last slot's first send is the first the load holds
            while (sent := feed.take(spread and stagger.held_ns is None)) is not None:
                index, warm, ramp = sent
                if gate is not None and not warm and not gate.ran:
                    await gate.run()
                now = time.perf_counter_ns()
                if self.deadline_ns is not None and now >= self.deadline_ns:
                    break
                stagger.ramp_requests += ramp
                await self.one(index, now, warm)
                if spread and i == 0 and not stagger.released.is_set():
                    stagger.pilot_ended(time.perf_counter_ns() - now)
                    await stagger.after_pilot()
            stagger.pilot_ended(None)  # slot 0 sent nothing more: release the others

        try:
            await asyncio.gather(*(slot(i) for i in range(concurrency)))
        finally:
            if stagger.request_ns is not None:
                self.request_time_ns = self.request_time_ns or stagger.request_ns
            self.staggers.append(stagger.describe(warmup))
        self.finalize_all()
        self.stop_if_failed()

    async def measure(self, begin: Callable[[], Any] | None = None) -> None:
        """The measured requests. With ``begin`` (a closed loop; an open loop's warm-up
        arrivals), the warm-up requests are sent first by the same slots or schedule, and
        ``begin`` marks the moment the first measured request is about to leave: there the
        clocks start, and a closed loop's --duration with them."""
        cfg = self.config
        start = cfg.warmup
        duration_ns = int(cfg.duration_s * 1e9) if cfg.duration_s else None
        monitors: list[asyncio.Task[None]] = []

        async def clocks_start() -> None:
            if begin is not None:
                await begin()
            if duration_ns is not None and cfg.rate is None:
                self.deadline_ns = time.perf_counter_ns() + duration_ns
            monitors.append(asyncio.create_task(self._watch_lag()))
            self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
            self.off_cpu.start()
            self.measuring.set()

        if cfg.rate is None:
            # continuous from index 0 unless a warm-up was sent before (with --duration)
            first = 0 if start and not cfg.duration_s else start
            load = self.closed_loop(itertools.count(first), cfg.concurrency or 1, False,
                                    duration_ns, warm_below=start, begin=clocks_start,
                                    measured=cfg.num_requests or None)
            deadline = None
        else:
            load, deadline = await self._open_load(begin, clocks_start, duration_ns)
        task = asyncio.ensure_future(load)
        try:
            if deadline is not None:
                await self._until(task, deadline + int(self.grace_s() * 1e9))
            elif duration_ns is not None:
                await self._until_measured(task)
            else:
                await task
        finally:
            for monitor in monitors:
                monitor.cancel()
            self.stop_clock()

    async def _until_measured(self, task: asyncio.Future[None]) -> None:
        """A closed loop's --duration: it runs from the first measured send (past the warm-up
        and the stagger's ramp, at most a few seconds: ``load.stagger``), then ``_until``."""
        started: asyncio.Future[Any] = asyncio.ensure_future(self.measuring.wait())
        waiting: set[asyncio.Future[Any]] = {task, started}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # Ctrl-C / SIGTERM: stop the load too
            task.cancel()
            raise
        finally:
            started.cancel()
        if self.deadline_ns is None:  # the load ended before its first measured send
            return await task
        await self._until(task, self.deadline_ns + int(self.grace_s() * 1e9))

    def grace_s(self) -> float:
        """How long requests in flight at the end of --duration may still finish."""
        cfg = self.config
        return min(cfg.duration_s or 0.0, _DURATION_GRACE_MAX_S, cfg.request_timeout_s)

    async def _until(self, task: asyncio.Future[None], stop_ns: int) -> None:
        """Waits for ``task`` until ``stop_ns``, then cancels it: --duration bounds the run even
        when the server stalls (the requests still in flight are then written as cancelled)."""
        try:
            done, _ = await asyncio.wait({task}, timeout=max(stop_ns - time.perf_counter_ns(),
                                                             0) / 1e9)
        except asyncio.CancelledError:  # Ctrl-C / SIGTERM: stop the load too
            task.cancel()
            raise
        if task in done:
            return task.result()
        for record in self.in_flight.values():
            record.error = f"still in flight {self.grace_s():g} s after --duration ended"
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def stop_clock(self) -> None:
        if self.cpu0 and not self.cpu_s:
            self.cpu_s = time.process_time() - self.cpu0
            self.wall_s = time.perf_counter() - self.wall0
            self.off_cpu.stop()

    async def _watch_lag(self) -> None:
        while True:
            t = time.perf_counter_ns()
            await asyncio.sleep(_LAG_INTERVAL_S)
            self.lag_ms.append((time.perf_counter_ns() - t) / 1e6 - _LAG_INTERVAL_S * 1e3)
            # the records written are on disk within the writer's bound even when no other
            # record follows them (a server that stalls, then a kill)
            self.writer.flush_if_due()

    def summary(self) -> dict[str, Any]:
        summary = self.stats.summary()
        by_group = {name: s.summary(summary["duration_s"]) for name, s in
                    sorted((self.groups or {}).items())}
        client = {"cpu_s": self.cpu_s, "wall_s": self.wall_s,
                  "cpu_utilization": self.cpu_s / self.wall_s if self.wall_s else None,
                  "loop_lag_ms": distribution(self.lag_ms, (50, 99)),
                  "run_queue_wait_s": self.off_cpu.waited_s,
                  # the unparsed responses' peak and how often a slot waited for them
                  "unparsed_peak_bytes": self.backlog_peak,
                  "backpressure_waits": self.backpressure_waits,
                  "event_loop": type(asyncio.get_event_loop()).__module__.split(".")[0],
                  # "c" (latscope/_native.c) or "python" where it was not built: 3.5-4x apart
                  # in CPU per token at full speed (docs/bench.md)
                  "stream_parser": STREAM_PARSER,
                  # built before the run, during it, in a send (the client fell behind)
                  "prompts": self.workload.prompts.figures()}
        out = compose_summary(summary, self.config.public_dict(), self.model,
                              {"tokenizer": self.workload.tokenizer,
                               "exact_lengths": self.workload.exact,
                               "notes": self.workload.notes + self.workload.prompts.notes()},
                              by_group, client, self.stats)
        add_staggers(out, self.staggers)
        return out
