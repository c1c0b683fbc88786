"""TelemetrySampler beside a run: samples on the run's clock, the server's GPUs from its process
tree, and no GPU / no driver / no permission as one line, never a traceback."""

from __future__ import annotations

import asyncio
import json
import os
import time

import fakenvml
import pytest
from fakenvml import FakeGpu

from latscope.model import RunContext
from latscope.telemetry.sample import GpuProcess
from latscope.telemetry.sampler import TelemetrySampler, read_telemetry
from latscope.telemetry.sources import NvmlSource, TelemetryUnavailable, open_source


def _run(sampler: TelemetrySampler, run_dir, until=lambda: True,
         timeout: float = 30.0) -> RunContext:
    """A run that lasts until ``until()`` holds (polled): the sampler's own progress, not a guess
    of how long it takes on this machine (fixed sleeps stood here)."""
    ctx = RunContext("http://127.0.0.1:9", run_dir, {}, time.perf_counter_ns(), time.time())

    async def go() -> None:
        await sampler.start(ctx)
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, f"the sampler never got there in {timeout} s"
            await asyncio.sleep(0.01)
        await sampler.stop(ctx)

    asyncio.run(go())
    return ctx


def test_samples_at_the_interval_and_names_the_server_gpus_and_others(tmp_path):
    me = os.getpid()
    gpus = [FakeGpu(processes=[(me, 80 * 2**30), (1, 4 * 2**30)], reasons=0x4,
                    fields={197: 0, 198: 0}),
            FakeGpu(processes=[(1, 2**30)])]
    nvml = fakenvml.make(gpus)
    sampler = TelemetrySampler(0.1, server_pid=me, opener=lambda: NvmlSource(nvml))
    start = _run(sampler, tmp_path, until=lambda: len(sampler.samples) >= 2 * 5).start_ns
    summary, samples = read_telemetry(tmp_path)
    assert summary.status == "ok" and summary.source.startswith("NVML")
    lines = [json.loads(x) for x in (tmp_path / "telemetry" / "samples.jsonl").read_text()
             .splitlines()]
    assert len(lines) >= 6  # start, 4 ticks, stop (one more tick may land before the stop)
    assert all(line["t_ns"] >= start for line in lines)
    # on the run's clock, never a burst: the i-th tick comes i intervals after the run's start
    # at the earliest (late on a busy machine, never early)
    assert all(line["t_ns"] - start >= i * 10**8 for i, line in enumerate(lines[1:-1], 1))
    assert {s.gpu for s in samples} == {0, 1}
    first = samples[0]
    assert first.util_pct == 97 and first.power_w == 650.0 and first.power_limit_w == 700
    assert first.reasons == ["sw_power_cap"] and first.sm_clock_max_mhz == 1980
    later = [s for s in samples if s.gpu == 0][1]
    # byte counters: a rate from the second sample on (these stood still), NVML's 20 ms
    # throughput call is not needed
    assert first.pcie_tx_MBps is None and later.pcie_tx_MBps == 0.0
    assert "pcie_tx_MBps" not in lines[0]["gpus"][0]  # not read: absent from the file
    assert "nvmlDeviceGetPcieThroughput" not in nvml.calls
    server = json.loads((tmp_path / "telemetry" / "telemetry.json").read_text())["server"]
    assert server["gpus"] == [0] and server["gpus_from"] == "the GPUs' process lists"
    assert server["others"] == {"0": [{"pid": 1, "used_bytes": 4 * 2**30}]}
    assert summary.server.others == {0: [GpuProcess(1, 4 * 2**30)]}
    assert nvml.shutdowns == 1


@pytest.mark.parametrize("code,why", [
    (fakenvml.DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
    (fakenvml.NO_PERMISSION, "no permission to read the NVIDIA GPUs"),
    (fakenvml.LIBRARY_NOT_FOUND, "no NVIDIA driver (libnvidia-ml.so)")])
def test_no_driver_or_permission_is_one_line_naming_it(code, why):
    modules = {"pynvml": fakenvml.make([], init_error=code)}

    def importer(name):
        if name not in modules:
            raise ImportError(name)
        return modules[name]

    with pytest.raises(TelemetryUnavailable) as exc:
        open_source(importer, which=lambda tool: None)
    assert str(exc.value) == f"{why}, no amdsmi, amd-smi or rocm-smi"


def test_a_cpu_host_is_one_line_of_80_columns():
    def importer(name):
        raise ImportError(name)

    with pytest.raises(TelemetryUnavailable) as exc:
        open_source(importer, which=lambda tool: None)
    line = f"No GPU telemetry: {exc.value}"  # the finding's title
    assert line == "No GPU telemetry: no NVIDIA driver, no amdsmi, amd-smi or rocm-smi"
    assert len(line) <= 70  # and the findings list puts "info     " before it


def test_no_gpu_at_all_is_said_so():
    def importer(name):
        if name == "pynvml":
            return fakenvml.make([])
        raise ImportError(name)

    with pytest.raises(TelemetryUnavailable, match=r"^no NVIDIA GPU \(NVML lists none\), no amdsmi"):
        open_source(importer, which=lambda tool: None)


def test_unavailable_run_writes_the_reason_and_no_sample(tmp_path):
    def opener():
        raise TelemetryUnavailable("NVIDIA: no driver (no pynvml, no nvidia-smi); AMD: none")

    _run(TelemetrySampler(0.05, opener=opener), tmp_path)  # nothing to wait for: no source
    summary, samples = read_telemetry(tmp_path)
    written = json.loads((tmp_path / "telemetry" / "telemetry.json").read_text())
    assert written == {"status": "unavailable", "interval_s": 0.05,
                       "why": "NVIDIA: no driver (no pynvml, no nvidia-smi); AMD: none"}
    assert summary.status == "unavailable" and summary.why == written["why"]
    assert samples == []


def test_a_read_that_fails_mid_run_is_noted_and_the_run_goes_on(tmp_path):
    gpu = FakeGpu()
    nvml = fakenvml.make([gpu])
    source = NvmlSource(nvml)
    calls = {"n": 0}
    real = source.read

    def flaky():
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("GPU is lost")
        return real()

    source.read = flaky
    _run(TelemetrySampler(0.05, opener=lambda: source), tmp_path, until=lambda: calls["n"] >= 3)
    summary, samples = read_telemetry(tmp_path)
    assert summary.errors == ["RuntimeError: GPU is lost"] and len(samples) >= 2
