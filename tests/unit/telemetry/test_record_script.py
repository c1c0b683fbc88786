"""benchmarks/record_gpu_telemetry.py against a fake pynvml: every reading recorded, every refused
call recorded as such, never a crash; no NVML is one line and exit 2."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

import fakenvml
from fakenvml import FakeGpu

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "record_gpu_telemetry.py"


@pytest.fixture()
def script():
    spec = importlib.util.spec_from_file_location("record_gpu_telemetry", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_records_every_reading_and_each_refusal(script, tmp_path, monkeypatch, capsys):
    gpus = [FakeGpu(processes=[(os.getpid(), 2**30)], xids=[79],
                    fields={197: 10_000, 198: 20_000}),
            FakeGpu(power_mw=fakenvml.error(fakenvml.NO_PERMISSION), clocks={0: 1000, 1: 990,
                                                                              2: 3201})]
    nvml = fakenvml.make(gpus, missing=("nvmlDeviceGetGpuMaxPcieLinkGeneration",))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    rc = script.main(["--seconds", "0.35", "--interval", "0.1", "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr()
    lines = _lines(tmp_path / "nvml.jsonl")
    assert [line["kind"] for line in lines[:2]] == ["system", "devices"]
    assert lines[0]["driver_version"] == "570.124.06"
    devices = lines[1]["gpus"]
    assert devices[0]["clocks.max.sm_mhz"] == 1980 and devices[0]["pcie.max_width"] == 16
    assert devices[0]["events.xid"] == "registered"
    assert devices[0]["errors"]["pcie.gpu_max_gen"] == "not in this nvidia-ml-py"
    samples = [line for line in lines if line["kind"] == "sample"]
    assert 2 <= len(samples) <= 5  # 0.35 s at 0.1 s, on a busy machine
    first = samples[0]["gpus"]
    assert first[0]["utilization.gpu_pct"] == 97 and first[0]["power.draw_mw"] == 650_000
    assert first[0]["memory.version"] == 2 and first[0]["memory.total_bytes"] == 143 * 2**30
    assert first[0]["pcie.tx_bytes_total"] == 10_000
    assert first[0]["errors"]["pcie.tx_kBps"] == "NVMLError_NotSupported: Not Supported"
    assert first[0]["errors"]["temperature.memory_c"].startswith("nvmlReturn 3")
    assert first[0]["xid_events"] == [{"xid": 79, "event_type": 8}]
    assert samples[1]["gpus"][0]["xid_events"] == []  # delivered once
    assert first[0]["processes"][0]["pid"] == os.getpid()
    assert "utilization" in first[0]["call_us"]
    assert "power.draw_mw" not in first[1]
    assert first[1]["errors"]["power.draw_mw"] == "NVMLError_NoPermission: Insufficient Permissions"
    assert first[1]["clocks.sm_mhz"] == 990
    procs = json.loads((tmp_path / "processes.json").read_text())
    assert procs[0]["pid"] == os.getpid() and procs[0]["comm"]
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["outcome"]["status"] == "ok" and nvml.shutdowns == 1


def test_no_driver_is_one_line_and_exit_2(script, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml",
                        fakenvml.make([], init_error=fakenvml.DRIVER_NOT_LOADED))
    rc = script.main(["--seconds", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err == ["record_gpu_telemetry: no NVML telemetry: "
                   "NVMLError_DriverNotLoaded: Driver Not Loaded"]
    assert json.loads((tmp_path / "meta.json").read_text())["outcome"]["status"] == "unavailable"


def test_secrets_in_command_lines_are_replaced(script):
    argv = ["vllm", "serve", "m", "--api-key", "sk-1", "--hf-token=hf_x",
            "--url", "http://u:pw@h:1/"]
    assert script.redact_argv(argv) == ["vllm", "serve", "m", "--api-key", "***",
                                        "--hf-token=***", "--url", "http://u:***@h:1/"]


def test_describes_this_process_with_only_its_visible_devices(script, monkeypatch):
    info = script.describe_process(os.getpid())
    assert info["ppid"] == os.getppid()
    assert set(info) <= {"pid", "comm", "cmdline", "ppid", *script.VISIBLE}


def test_a_recording_reads_back_as_a_run_directory(script, tmp_path, monkeypatch):
    from latscope.findings.telemetry import telemetry_findings
    from latscope.telemetry.facts import telemetry_facts
    from latscope.telemetry.recording import recording_to_run
    from latscope.telemetry.sample import GpuProcess

    me = os.getpid()
    gpus = [FakeGpu(processes=[(me, 60 * 2**30), (1, 2**30)], reasons=0x4,
                    clocks={0: 1500, 1: 1500, 2: 3201})]
    monkeypatch.setitem(sys.modules, "pynvml", fakenvml.make(gpus))
    rec = tmp_path / "rec"
    assert script.main(["--seconds", "0.3", "--interval", "0.1", "--out", str(rec),
                        "--server-pid", str(me)]) == 0
    run = recording_to_run(rec, tmp_path / "run", interval_s=0.1)
    facts = telemetry_facts(run)
    assert facts.status == "ok" and facts.gpus == (0,)
    assert facts.per_gpu[0].sm_clock_mhz_mean == 1500
    assert facts.others == {0: [GpuProcess(1, 2**30)]}
    ids = [f.id for f in telemetry_findings(facts)]
    assert ids == ["gpu.busy", "gpu.other_process"]  # no /metrics recorded: nothing "queued"
