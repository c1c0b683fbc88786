"""The AMD readers on real tool output (tests/data/telemetry/README.md names each source)."""

from __future__ import annotations

import json
import subprocess
import types
from pathlib import Path

import pytest

from latscope.telemetry import amd
from latscope.telemetry.files import DeviceInfo
from latscope.telemetry.sample import GpuProcess
from latscope.telemetry.sources import AmdCliSource, AmdLibSource

DATA = Path(__file__).resolve().parents[2] / "data" / "telemetry"


def _load(name: str):
    return json.loads((DATA / name).read_text())


def test_rocm_smi_mi100_reads_every_card_and_skips_the_system_block():
    samples = amd.from_rocm_smi(_load("rocm-smi-mi100-rocm602.json"), 5, 1.5)
    assert [s.gpu for s in samples] == [0, 1]
    s = samples[1]
    assert s.util_pct == 0.0 and s.power_w == 44.0 and s.power_limit_w == 290.0
    assert s.mem_total_bytes == 34342961152 and s.mem_used_bytes == 6750208
    assert s.temp_c == 58.0  # junction, not edge
    assert s.sm_clock_mhz == 300.0 and s.mem_clock_mhz == 1200.0
    assert (s.pcie_gen, s.pcie_width) == (4, 16)  # "0 (16.0GT/s x16)"
    assert (s.t_ns, s.wall_time) == (5, 1.5)


def test_amd_smi_power_example_reads_socket_power_and_throttle_status():
    [s] = amd.from_amd_smi_metric(_load("amd-smi-metric-power.json"), 1, 2.0)
    assert s.gpu == 0 and s.power_w == 10.0 and s.reasons == []
    assert s.util_pct is None  # not in this output: absent, never zero


def test_amd_smi_process_example_lists_both_processes():
    procs = amd.from_amd_smi_process(_load("amd-smi-process.json"))
    assert procs == {0: [GpuProcess(420157, 0), GpuProcess(420315, 0)]}


def test_rocm7_gpu_data_shape_and_na_values():
    # the ROCm 7 envelope ({"gpu_data": [...]}) with the keys of amdsmi_cli/amdsmi_commands.py
    payload = {"gpu_data": [{
        "gpu": 0, "usage": {"gfx_activity": {"value": 100, "unit": "%"}},
        "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"},
                      "used_vram": {"value": 180000, "unit": "MB"}},
        "power": {"socket_power": {"value": 745, "unit": "W"}, "throttle_status": "THROTTLED"},
        "clock": {"gfx_0": {"clk": {"value": 1700, "unit": "MHz"},
                            "max_clk": {"value": 2100, "unit": "MHz"}}},
        "temperature": {"edge": "N/A", "hotspot": {"value": 80, "unit": "C"}},
        "pcie": {"width": 16, "speed": {"value": 32, "unit": "GT/s"}},
        "ecc": {"total_correctable_count": 2, "total_uncorrectable_count": 0}}]}
    [s] = amd.from_amd_smi_metric(payload, 0, 0.0)
    assert s.util_pct == 100 and s.mem_used_bytes == 180000 * 2**20
    assert s.sm_clock_mhz == 1700 and s.sm_clock_max_mhz == 2100
    assert s.temp_c == 80 and (s.pcie_gen, s.pcie_width) == (5, 16)
    assert s.reasons == ["throttled"] and s.ecc_corrected == 2


def test_cli_source_runs_amd_smi_and_joins_its_processes():
    outputs = {"metric": (DATA / "amd-smi-metric-power.json").read_text(),
               "process": (DATA / "amd-smi-process.json").read_text()}
    calls = []

    def runner(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, outputs[argv[1]], "")

    source = AmdCliSource("amd-smi", runner)
    [s] = source.read()
    assert s.processes[0].pid == 420157 and s.power_w == 10.0
    assert calls[0] == list(amd.AMD_SMI_METRIC) and source.devices == [DeviceInfo(index=0)]


def test_cli_source_failure_is_an_error_with_the_tool_s_words():
    def runner(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 255, "", "AMD-SMI: no GPUs detected\n")

    with pytest.raises(OSError, match="exit 255: AMD-SMI: no GPUs detected"):
        AmdCliSource("rocm-smi", runner)


def test_amdsmi_library_reader_maps_the_documented_dicts_and_survives_refusals():
    class Refused(Exception):
        pass

    def refuse(*args):
        raise Refused("AMDSMI_STATUS_NOT_SUPPORTED")

    lib = types.SimpleNamespace(
        amdsmi_init=lambda: None, amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["h0"],
        AmdSmiClkType=types.SimpleNamespace(GFX=0),
        amdsmi_get_gpu_activity=lambda h: {"gfx_activity": 73, "umc_activity": 40,
                                           "mm_activity": "N/A"},
        amdsmi_get_gpu_vram_usage=lambda h: {"vram_total": 196592, "vram_used": 1024},
        amdsmi_get_power_info=lambda h: {"current_socket_power": 512,
                                         "average_socket_power": "N/A", "power_limit": 750},
        amdsmi_get_clock_info=lambda h, t: {"clk": 2100, "min_clk": 500, "max_clk": 2100},
        amdsmi_get_pcie_info=lambda h: {"pcie_static": {"max_pcie_width": 16,
                                                        "max_pcie_speed": 32000},
                                        "pcie_metric": {"pcie_width": 16, "pcie_speed": 16000}},
        amdsmi_get_gpu_total_ecc_count=refuse,
        amdsmi_get_gpu_process_list=lambda h: [{"pid": 7, "memory_usage": {"vram_mem": 5}}])
    source = AmdLibSource(lib)
    [s] = source.read()
    assert s.util_pct == 73 and s.power_w == 512 and s.power_limit_w == 750
    assert s.mem_total_bytes == 196592 * 2**20 and s.sm_clock_max_mhz == 2100
    assert (s.pcie_gen, s.pcie_max_gen) == (4, 5)
    assert s.ecc_corrected is None and s.processes == [GpuProcess(7, 5)]
