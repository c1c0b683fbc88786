"""The readers, facts, findings and report series on a real H200 recording under vLLM load
(tests/data/telemetry/README.md): record_gpu_telemetry.py beside three diagnose sweeps."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from latscope.findings.telemetry import capacity_hint, telemetry_findings
from latscope.report import plots
from latscope.telemetry.facts import telemetry_facts
from latscope.telemetry.recording import read_recording, recording_to_run
from latscope.telemetry.series import telemetry_section

DATA = Path(__file__).resolve().parents[2] / "data" / "telemetry" / "h200-load"


@pytest.fixture(scope="module")
def rec(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rec")
    for name in ("nvml.jsonl", "metrics.jsonl"):
        with gzip.open(DATA / f"{name}.gz", "rb") as src, (out / name).open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


@pytest.fixture(scope="module")
def run(rec: Path, tmp_path_factory) -> Path:
    return recording_to_run(rec, tmp_path_factory.mktemp("run"), interval_s=1.0)


def test_every_reading_of_the_h200_was_answered_and_normalised(rec):
    recording = read_recording(rec)
    samples, raw = recording.samples, recording.raw
    assert recording.system["driver_version"] == "580.159.04"
    [device] = recording.devices
    assert device.get("name") == "NVIDIA H200" and device.get("clocks.max.sm_mhz") == 1980
    assert device.get("pcie.max_gen") == 5 and device.get("events.xid") == "registered"
    assert len(samples) == 314 and all(not r.errors for r in raw)
    keys = {"util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "power_limit_w",
            "sm_clock_mhz", "sm_clock_max_mhz", "temp_c", "reasons", "violation_s",
            "pcie_gen", "pcie_width", "pcie_max_gen", "ecc_corrected", "processes"}
    assert all(getattr(s, key) is not None for s in samples for key in keys)
    assert all(s.pcie_tx_MBps is not None for s in samples[1:])  # from the byte counters
    assert {s.power_limit_w for s in samples} == {700.0}
    assert min(s.sm_clock_mhz for s in samples) == 345  # idle before the server started
    assert max(s.power_w for s in samples) == pytest.approx(694.2, abs=0.1)


def test_clocks_held_down_by_the_power_cap_while_requests_queued(run):
    facts = telemetry_facts(run)
    assert facts.status == "ok" and facts.gpus == (0,)
    queued, busy = facts.queued, facts.busy
    assert queued.scrapes == 6 and busy.scrapes == 94 and facts.joined == 181
    assert queued.reasons == ("sw_power_cap",) and queued.thermal_limited_share == 0
    assert queued.limited_share == pytest.approx(5 / 6)
    assert busy.util_pct_p50 == 100
    violation = facts.per_gpu[0].violation_s
    assert violation["power"] == pytest.approx(65.6, abs=0.1) and violation["thermal"] == 0
    found = {f.id: f for f in telemetry_findings(facts)}
    assert set(found) == {"gpu.busy", "gpu.clocks_limited"}  # PCIe 5 x16, no ECC/XID, 94% memory
    limited = found["gpu.clocks_limited"]
    # the H200 ran at its default 700 W limit: the design ceiling, not a fault
    assert limited.severity.value == "info"
    assert limited.title == ("GPU clocks held below max by the power limit in 83% of the "
                             "scrapes with requests queued (SM clock at 78% of max)")
    hint = capacity_hint(facts)
    assert hint.limit == "gpu" and hint.gpu_busy_pct == pytest.approx(89.8, abs=0.1)
    assert "clocks held down by a limit in 43%" in hint.text


def test_the_series_line_up_with_the_server_scrapes(run):
    section = telemetry_section([run])
    assert len(section.t_s) == 314
    # t=0 is the first scrape the server answered; the GPU was sampled 128 s before it
    assert section.t_s[0] == pytest.approx(-128.0, abs=0.1)
    spec = plots.timeseries_spec(None, section)
    assert [p["encoding"]["y"]["title"] for p in spec["vconcat"]][0] == "GPU busy (%)"
