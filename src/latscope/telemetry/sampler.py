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
import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

from latscope.model import RunContext
from latscope.rundir import iter_jsonl

DIR = "telemetry"
SAMPLES = "samples.jsonl"
SUMMARY = "telemetry.json"


class TelemetrySampler:
    """Sample the host's GPUs every ``interval_s``; ``server_pid``/``server_port`` find the
    server's processes (the port of ``ctx.base_url`` when neither is given)."""

    def __init__(self, interval_s: float = 2.0, *, server_pid: int | None = None,
                 server_port: int | None = None,
                 opener: Callable[[], Any] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.interval_s = interval_s
        self.server_pid, self.server_port = server_pid, server_port
        self._opener = opener
        self._source: Any = None
        self._why = ""
        self._dir: Path | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        self._count = 0
        self._read_ms: list[float] = []
        self._errors: list[str] = []
        self.samples: list[dict[str, Any]] = []  # flat GpuSamples, all GPUs

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

    def _open(self) -> tuple[Any, str]:
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
        with self._lock:  # a read cancelled at stop() may still be running in its thread
            start = time.perf_counter_ns()
            gpus = self._source.read()
            self._read_ms.append((time.perf_counter_ns() - start) / 1e6)
            if not gpus:
                return
            line = {"t_ns": gpus[0]["t_ns"], "wall_time": gpus[0]["wall_time"], "gpus": gpus}
            assert self._dir is not None
            with (self._dir / SAMPLES).open("a") as fh:
                fh.write(json.dumps(line) + "\n")
            self.samples.extend(gpus)
            self._count += 1

    def _write_summary(self, ctx: RunContext) -> None:
        assert self._dir is not None
        (self._dir / SUMMARY).write_text(json.dumps(self.summary(ctx), indent=2))

    def summary(self, ctx: RunContext | None = None) -> dict[str, Any]:
        if self._source is None:
            return {"status": "unavailable", "why": self._why, "interval_s": self.interval_s}
        out: dict[str, Any] = {"status": "ok", "source": self._source.name,
                               "interval_s": self.interval_s, "samples": self._count,
                               "devices": _static(self._source.devices), "errors": self._errors}
        if self._read_ms:
            out["read_ms"] = {"mean": sum(self._read_ms) / len(self._read_ms),
                              "max": max(self._read_ms)}
        out["server"] = self._holders(ctx)
        return out

    def _holders(self, ctx: RunContext | None) -> dict[str, Any]:
        from latscope.server.hostview import HostView, url_port
        from latscope.telemetry.holders import holders, server_pids, visible_devices

        view = HostView()
        port = self.server_port or (url_port(ctx.base_url) if ctx is not None else None)
        pids, found = server_pids(view, self.server_pid, port)
        out = holders(self.samples, pids, visible_devices(view, pids), self._source.devices)
        out["server_pids_from"] = found
        return out


def _static(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = ("index", "name", "uuid", "pci.bus_id", "clocks.max.sm_mhz", "clocks.max.mem_mhz",
            "pcie.max_gen", "pcie.gpu_max_gen", "pcie.max_width", "power.default_limit_mw",
            "temperature.slowdown_c", "ecc.mode", "events.xid", "mig.mode")
    return [{k: d[k] for k in keep if k in d} for d in devices]


def read_telemetry(run_dir: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """``telemetry.json`` (None when the run had no sampler) and every ``GpuSample``."""
    base = Path(run_dir) / DIR
    summary = None
    if (base / SUMMARY).is_file():
        try:
            summary = json.loads((base / SUMMARY).read_text())
        except (OSError, ValueError):
            summary = None
    samples = [g for line in iter_jsonl(base / SAMPLES) for g in line.get("gpus") or ()]
    if summary is None and samples:
        summary = {"status": "ok", "source": "samples.jsonl (the run stopped before its "
                   "summary was written)"}
    return summary, samples
