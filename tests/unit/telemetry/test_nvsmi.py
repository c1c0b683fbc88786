"""``nvidia-smi -q -x`` read on a real H200 capture (tests/data/telemetry/README.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from latscope.telemetry.files import DeviceInfo
from latscope.telemetry.nvsmi import NvidiaSmiSource, from_xml

XML = (Path(__file__).resolve().parents[2] / "data" / "telemetry"
       / "h200-nvidia-smi-q-idle.xml").read_text()


def test_idle_h200_reads_every_field_with_its_unit():
    [s] = from_xml(XML, 7, 1.0)
    assert s.gpu == 0 and s.util_pct == 0
    assert s.mem_total_bytes == 143771 * 2**20 and s.mem_used_bytes == 0
    assert s.power_w == pytest.approx(80.13) and s.power_limit_w == 700.0
    assert (s.sm_clock_mhz, s.sm_clock_max_mhz) == (345, 1980)
    assert (s.mem_clock_mhz, s.mem_clock_max_mhz) == (3201, 3201)
    assert s.temp_c == 39
    assert (s.pcie_gen, s.pcie_width, s.pcie_max_gen, s.pcie_max_width) == \
        (5, 16, 5, 16)
    assert s.pcie_tx_MBps == pytest.approx(1.08)
    assert s.reasons == ["gpu_idle"]  # idle: low clocks, and no limit among the reasons
    assert (s.ecc_corrected, s.ecc_uncorrected) == (0, 0) and s.processes == []


def test_nvidia_smi_source_runs_the_tool_and_reports_its_failure():
    calls = []

    def ok(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, XML, "")

    source = NvidiaSmiSource(ok)
    assert source.devices == [DeviceInfo(index=0)] and calls[0] == ["nvidia-smi", "-q", "-x"]

    def failing(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 9, "", "NVIDIA-SMI has failed because it "
                                           "couldn't communicate with the NVIDIA driver.")

    with pytest.raises(OSError, match="exit 9: NVIDIA-SMI has failed"):
        NvidiaSmiSource(failing)
