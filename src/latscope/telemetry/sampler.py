"""``TelemetrySampler``: reads the GPUs in step with a load run, beside the ``/metrics`` scraper.

A ``RunObserver`` like ``latscope.server.scrape.MetricsScraper``: ``start`` reads once, then every
``interval_s`` on an absolute schedule anchored at the run's ``start_ns`` (the scraper's ticks
are anchored at its first scrape, a few ms later: with the same interval, each scrape has a GPU
sample within a few ms of it), and ``stop`` reads once more. Readings are blocking library calls
(or a CLI subprocess), so each runs in a worker thread; an NVML read of an H200 took 13.7 ms
median (docs/telemetry.md) and releases the GIL in ctypes.

Written into the run directory, under ``telemetry/``:

- ``samples.jsonl``: one line per read, ``{"t_ns", "wall_time", "gpus": [GpuSample, ...]}``,
  appended as it is taken (Ctrl-C keeps them);
- ``telemetry.json``: status (``ok`` / ``unavailable`` with the one-line reason), the source, the
  GPUs' static facts, which GPUs the server's processes hold and who else is on them, the
  sampler's own cost.

No GPU, driver, library or permission never breaks the run: ``telemetry.json`` says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import msgspec

from latscope.errors import ConfigError
from latscope.model import RunContext
from latscope.rundir import iter_jsonl
from latscope.telemetry.files import (
    DIR,
    SAMPLES,
    SUMMARY,
    DeviceInfo,
    ReadCost,
    SampleLine,
    ServerGpus,
    TelemetrySummary,
    encode_line,
    read_summary,
    write_summary,
)
from latscope.telemetry.sample import GpuSample

if TYPE_CHECKING:
    from latscope.telemetry.sources import GpuSource


class TelemetrySampler:
    """Sample the host's GPUs every ``interval_s``; ``server_pid``/``server_port`` find the
    server's processes (the port of ``ctx.base_url`` when neither is given)."""

    def __init__(self, interval_s: float = 2.0, *, server_pid: int | None = None,
                 server_port: int | None = None,
                 opener: Callable[[], GpuSource] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.interval_s = interval_s
        self.server_pid, self.server_port = server_pid, server_port
        self._opener = opener
        self._source: GpuSource | None = None
        self._why = ""
        self._dir: Path | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        self._count = 0
        self._read_ms: list[float] = []
        self._errors: list[str] = []
        self.samples: list[GpuSample] = []  # every GPU's, flat

    async def start(self, ctx: RunContext) -> None:
        self._dir = ctx.run_dir / DIR
        self._dir.mkdir(parents=True, exist_ok=True)
        (self._dir / SAMPLES).write_bytes(b"")
        self._source, self._why = await asyncio.to_thread(self._open)
        if self._source is None:
            return
        await self._sample()
        self._task = asyncio.create_task(self._loop(ctx.start_ns), name="latscope-telemetry")

    async def stop(self, ctx: RunContext) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            if self._source is not None:
                await self._sample()
                await asyncio.to_thread(self._source.close)
        finally:
            await asyncio.to_thread(self._write_summary, ctx)

    def _open(self) -> tuple[GpuSource | None, str]:
        from latscope.telemetry.sources import TelemetryUnavailable, open_source

        try:
            return (self._opener or open_source)(), ""
        except TelemetryUnavailable as exc:
            return None, str(exc)
        except Exception as exc:  # noqa: BLE001 -- a broken driver stack must not break the run
            return None, f"{type(exc).__name__}: {exc}"

    async def _loop(self, anchor_ns: int) -> None:
        period = int(self.interval_s * 1e9)
        k = max(1, (time.perf_counter_ns() - anchor_ns) // period + 1)
        while True:
            await asyncio.sleep(max(0.0, (anchor_ns + k * period - time.perf_counter_ns()) / 1e9))
            await self._sample()
            # a slow read skips the ticks it missed instead of bursting
            k = max(k + 1, (time.perf_counter_ns() - anchor_ns) // period + 1)

    async def _sample(self) -> None:
        try:
            await asyncio.to_thread(self._read_and_append)
        except Exception as exc:  # noqa: BLE001 -- one failed read is noted, the next is tried
            if len(self._errors) < 5:
                self._errors.append(f"{type(exc).__name__}: {exc}")

    def _read_and_append(self) -> None:
        source = self._source
        assert source is not None  # reads start only once a source opened
        with self._lock:  # a read cancelled at stop() may still be running in its thread
            start = time.perf_counter_ns()
            gpus = source.read()
            self._read_ms.append((time.perf_counter_ns() - start) / 1e6)
            if not gpus:
                return
            line = SampleLine(gpus[0].t_ns, gpus[0].wall_time, gpus)
            assert self._dir is not None
            with (self._dir / SAMPLES).open("ab") as fh:
                fh.write(encode_line(line))
            self.samples.extend(gpus)
            self._count += 1

    def _write_summary(self, ctx: RunContext) -> None:
        assert self._dir is not None
        write_summary(self._dir / SUMMARY, self.summary(ctx))

    def summary(self, ctx: RunContext | None = None) -> TelemetrySummary:
        if self._source is None:
            return TelemetrySummary(status="unavailable", why=self._why,
                                    interval_s=self.interval_s)
        cost = (ReadCost(sum(self._read_ms) / len(self._read_ms), max(self._read_ms))
                if self._read_ms else None)
        return TelemetrySummary(status="ok", source=self._source.name,
                                interval_s=self.interval_s, samples=self._count,
                                devices=self._source.devices, errors=self._errors,
                                read_ms=cost, server=self._holders(ctx, self._source.devices))

    def _holders(self, ctx: RunContext | None, devices: list[DeviceInfo]) -> ServerGpus:
        from latscope.server.hostview import HostView, url_port
        from latscope.telemetry.holders import holders, server_pids, visible_devices

        view = HostView()
        port = self.server_port or (url_port(ctx.base_url) if ctx is not None else None)
        pids, found = server_pids(view, self.server_pid, port)
        return holders(self.samples, pids, visible_devices(view, pids), devices, found)


def read_telemetry(run_dir: Path) -> tuple[TelemetrySummary | None, list[GpuSample]]:
    """``telemetry.json`` (None when the run had no sampler) and every ``GpuSample``; a line
    that is not a tick latscope wrote is a one-line error naming the file."""
    base = Path(run_dir) / DIR
    summary = read_summary(base / SUMMARY) if (base / SUMMARY).is_file() else None
    samples: list[GpuSample] = []
    for obj in iter_jsonl(base / SAMPLES):
        try:
            samples += msgspec.convert(obj, SampleLine, strict=False).gpus
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{base / SAMPLES}: not a GPU sample latscope wrote ({exc})") \
                from None
    if summary is None and samples:
        summary = TelemetrySummary(status="ok", source="samples.jsonl (the run stopped before "
                                   "its summary was written)")
    return summary, samples
