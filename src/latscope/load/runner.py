"""Drives one load run: prepare, warm up, measure, write everything as it happens, summarise.

Everything that costs CPU (prompt building, request bodies, the arrival schedule) is done before
the first measured request. A closed loop keeps ``concurrency`` requests in flight, each scheduled
the moment a slot frees; an open loop sends on a precomputed Poisson/gamma schedule and measures
every latency from the *scheduled* time, so the client's own lag is counted, then reported
separately (send lag, event-loop lag, client CPU) with a warning when the client is the bottleneck.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from latscope.analysis.stats import distribution, summarize
from latscope.load.arrival import arrival_offsets_ns
from latscope.load.client import StreamingClient
from latscope.load.config import BenchConfig
from latscope.load.prepare import (base_url_of, discover_model, make_manifest, pick_tokenizer,
                                   prompt_count, request_body)
from latscope.load.response import finalize
from latscope.load.rundir import RunWriter, default_run_dir
from latscope.load.workload import Workload, build_workload
from latscope.model import ErrorKind, RequestRecord, RunContext, RunObserver

_LAG_INTERVAL_S = 0.01
OnRecord = Callable[[RequestRecord], None]


@dataclass
class BenchResult:
    run_dir: Path
    records: list[RequestRecord]
    summary: dict[str, Any]
    config: BenchConfig
    manifest: dict[str, Any]


def run_bench(config: BenchConfig, observers: Iterable[RunObserver] = (),
              on_record: OnRecord | None = None) -> BenchResult:
    """Synchronous entry point: owns its event loop (uvloop when installed and enabled)."""
    factory = None
    if config.use_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop
            factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(arun_bench(config, observers, on_record))


async def arun_bench(config: BenchConfig, observers: Iterable[RunObserver] = (),
                     on_record: OnRecord | None = None) -> BenchResult:
    config.validate()
    base_url = base_url_of(config.url)
    headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    model = config.model or await asyncio.to_thread(discover_model, base_url, headers)
    tokenizer = await asyncio.to_thread(pick_tokenizer, config, base_url, model, headers)
    workload = await asyncio.to_thread(build_workload, config.workload, prompt_count(config),
                                       tokenizer, config.seed)
    bodies = [request_body(config, model, p) for p in workload.prompts]
    run = _Run(config, base_url, headers, bodies, workload, on_record)
    manifest = make_manifest(config, base_url, model, workload, run.tag)
    run.writer.write_manifest(manifest)
    observers = list(observers)
    try:
        if config.warmup:
            await run.closed_loop(range(config.warmup), min(config.concurrency or 1,
                                                             config.warmup), warmup=True)
        ctx = RunContext(base_url=base_url, run_dir=run.writer.run_dir, headers=headers,
                         start_ns=time.perf_counter_ns(), start_wall=time.time())
        manifest.update(start_ns=ctx.start_ns, start_wall=ctx.start_wall)
        run.writer.write_manifest(manifest)
        started: list[RunObserver] = []
        try:
            for obs in observers:
                await obs.start(ctx)
                started.append(obs)
            await run.measure()
        finally:
            run.stop_clock()
            for obs in started:
                with contextlib.suppress(Exception):  # one observer's failure must not lose data
                    await obs.stop(ctx)
    finally:
        run.cancel_in_flight()
        summary = run.summary(model)
        run.writer.write_summary(summary)
        run.writer.close()
        run.client.close()
    return BenchResult(run.writer.run_dir, run.records, summary, config, manifest)


class _Run:
    """The mutable state of one run."""

    def __init__(self, config: BenchConfig, base_url: str, headers: dict[str, str],
                 bodies: list[bytes], workload: Workload, on_record: OnRecord | None) -> None:
        self.config, self.bodies, self.workload, self.on_record = config, bodies, workload, on_record
        path = "/v1/chat/completions" if config.endpoint == "chat" else "/v1/completions"
        self.client = StreamingClient(base_url, path, headers, config.request_timeout_s,
                                      trace=config.trace_requests)
        # Trace ids drawn before the run, so none of that work lands in a send.
        self.trace_ids = ([os.urandom(16).hex() for _ in bodies] if config.trace_requests
                          else [])
        self.writer = RunWriter(config.output_dir or default_run_dir())
        self.tag = f"{time.time_ns():x}"[-8:]
        self.records: list[RequestRecord] = []
        self.in_flight: dict[int, RequestRecord] = {}
        self.to_finalize: deque[tuple[RequestRecord, Any]] = deque()
        self.finalizing = False
        self.lag_ms: list[float] = []
        self.cpu0 = self.wall0 = 0.0
        self.cpu_s = self.wall_s = 0.0

    async def one(self, index: int, scheduled_ns: int, warmup: bool) -> None:
        prompt = self.workload.prompts[index % len(self.workload.prompts)]
        record = RequestRecord(index=index, request_id=f"latscope-{self.tag}-{index}",
                               scheduled_ns=scheduled_ns, warmup=warmup,
                               prompt_tokens=prompt.prompt_tokens,
                               expected_output_tokens=prompt.output_tokens, group=prompt.group,
                               trace_id=self._trace_id(index))
        self.in_flight[index] = record
        exchange = await self.client.execute(self.bodies[index % len(self.bodies)], record)
        del self.in_flight[index]
        self.to_finalize.append((record, exchange))
        if not self.finalizing:
            self.finalizing = True
            asyncio.get_running_loop().call_soon(self._finalize_one)

    def _trace_id(self, index: int) -> str | None:
        if not self.trace_ids:
            return None
        if index < len(self.trace_ids):
            return self.trace_ids[index]
        return f"{random.getrandbits(128):032x}"  # a --duration run past the prepared pool

    def _finalize_one(self) -> None:
        """Parse one finished response per event-loop turn, so that parsing a burst of finished
        responses never holds back the receive timestamps of the requests still streaming."""
        if self.to_finalize:  # (finalize_all may have emptied it meanwhile)
            record, exchange = self.to_finalize.popleft()
            finalize(record, exchange, self.config.stream)
            self._finished(record)
        if self.to_finalize:
            asyncio.get_running_loop().call_soon(self._finalize_one)
        else:
            self.finalizing = False

    def finalize_all(self) -> None:
        while self.to_finalize:
            record, exchange = self.to_finalize.popleft()
            finalize(record, exchange, self.config.stream)
            self._finished(record)

    def _finished(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.writer.append(record)
        if self.on_record is not None:
            self.on_record(record)

    async def closed_loop(self, indices: Iterable[int], concurrency: int, warmup: bool,
                          deadline_ns: int | None = None) -> None:
        it: Iterator[int] = iter(indices)

        async def slot() -> None:
            for index in it:
                now = time.perf_counter_ns()
                if deadline_ns is not None and now >= deadline_ns:
                    return
                await self.one(index, now, warmup)

        await asyncio.gather(*(slot() for _ in range(concurrency)))
        self.finalize_all()

    async def open_loop(self, indices: range, deadline_ns: int | None) -> None:
        offsets = arrival_offsets_ns(self.config.rate or 1.0, len(indices),
                                     burstiness=self.config.burstiness, seed=self.config.seed)
        cap = asyncio.Semaphore(self.config.concurrency) if self.config.concurrency else None

        async def capped(index: int, scheduled: int) -> None:
            if cap is None:
                return await self.one(index, scheduled, False)
            async with cap:  # the wait for a slot stays inside the measured latency
                await self.one(index, scheduled, False)

        tasks = []
        t0 = time.perf_counter_ns()
        for index, offset in zip(indices, offsets.tolist()):
            scheduled = t0 + offset
            if deadline_ns is not None and scheduled >= deadline_ns:
                break
            delay = scheduled - time.perf_counter_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            tasks.append(asyncio.create_task(capped(index, scheduled)))
        await asyncio.gather(*tasks)
        self.finalize_all()

    async def measure(self) -> None:
        cfg = self.config
        start = cfg.warmup
        stop = start + cfg.num_requests if cfg.num_requests else (
            start + 10**9 if cfg.rate is None else start + len(self.bodies))
        deadline = (time.perf_counter_ns() + int(cfg.duration_s * 1e9)) if cfg.duration_s else None
        monitor = asyncio.create_task(self._watch_lag())
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        try:
            if cfg.rate is None:
                await self.closed_loop(range(start, stop), cfg.concurrency or 1, False, deadline)
            else:
                await self.open_loop(range(start, stop), deadline)
        finally:
            monitor.cancel()
            self.stop_clock()

    def stop_clock(self) -> None:
        if self.cpu0 and not self.cpu_s:
            self.cpu_s = time.process_time() - self.cpu0
            self.wall_s = time.perf_counter() - self.wall0

    async def _watch_lag(self) -> None:
        while True:
            t = time.perf_counter_ns()
            await asyncio.sleep(_LAG_INTERVAL_S)
            self.lag_ms.append((time.perf_counter_ns() - t) / 1e6 - _LAG_INTERVAL_S * 1e3)

    def cancel_in_flight(self) -> None:
        """Requests still in flight when the run stops are written as cancelled, not dropped."""
        self.finalize_all()
        for record in list(self.in_flight.values()):
            record.error_kind = ErrorKind.CANCELLED.value
            record.error = "run stopped while the request was in flight"
            self._finished(record)
        self.in_flight.clear()

    def summary(self, model: str) -> dict[str, Any]:
        cfg = self.config
        summary = summarize(self.records, percentiles=cfg.percentiles, slo=cfg.slo)
        summary["model"], summary["endpoint"], summary["stream"] = model, cfg.endpoint, cfg.stream
        summary["load"] = {"mode": "closed" if cfg.rate is None else "open",
                           "concurrency": cfg.concurrency, "rate": cfg.rate,
                           "burstiness": cfg.burstiness if cfg.rate else None}
        summary["workload"] = {"tokenizer": self.workload.tokenizer,
                               "exact_lengths": self.workload.exact, "notes": self.workload.notes}
        summary["by_group"] = self._by_group(summary["duration_s"])
        summary["client"] = self._client_figures(summary)
        return summary

    def _by_group(self, duration_s: float | None) -> dict[str, Any]:
        """Per mix entry / shared-prefix group, when the workload has more than one."""
        prompts = self.workload.prompts
        groups: dict[str, list[RequestRecord]] = {}
        for r in self.records:
            groups.setdefault(prompts[r.index % len(prompts)].group, []).append(r)
        if len(groups) < 2:
            return {}
        keys = ("requests", "errors", "ttft_ms", "tpot_ms", "e2e_ms")
        return {name: {k: v for k, v in summarize(recs, percentiles=self.config.percentiles,
                                                  duration_s=duration_s).items() if k in keys}
                for name, recs in sorted(groups.items())}

    def _client_figures(self, summary: dict[str, Any]) -> dict[str, Any]:
        out_tokens = summary["tokens"]["output_total"]
        lag = distribution(self.lag_ms, (50, 99))
        # p99 of send lag for the warning, whatever --percentiles the summary was asked for
        send_lag = distribution([(r.sent_ns - r.scheduled_ns) / 1e6 for r in self.records
                                 if r.sent_ns and not r.warmup], (99,))
        figures = {
            "cpu_s": self.cpu_s, "wall_s": self.wall_s,
            "cpu_utilization": self.cpu_s / self.wall_s if self.wall_s else None,
            "cpu_us_per_output_token": self.cpu_s / out_tokens * 1e6 if out_tokens else None,
            "loop_lag_ms": lag,
            "send_lag_p99_ms": send_lag["p99"],
            "event_loop": type(asyncio.get_event_loop()).__module__.split(".")[0],
        }
        figures["warnings"] = _client_warnings(figures, summary)
        return figures


def _client_warnings(figures: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    warnings = []
    util = figures["cpu_utilization"] or 0.0
    if util > 0.9:
        warnings.append(f"client used {util:.0%} of a CPU core: it may be the bottleneck; "
                        "latencies include client delay")
    lag_p99 = figures["loop_lag_ms"].get("p99") or 0.0
    if lag_p99 > 5:
        warnings.append(f"event-loop lag p99 {lag_p99:.1f} ms: timestamps may be late by that much")
    send_p99 = figures.get("send_lag_p99_ms") or 0.0
    if send_p99 > 5:
        warnings.append(f"send lag p99 {send_p99:.1f} ms: requests left later than scheduled")
    return warnings
