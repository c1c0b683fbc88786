"""``nvidia-smi -q -x`` read as ``GpuSample``s: the NVIDIA fallback where ``nvidia-smi`` exists
but ``pynvml`` (nvidia-ml-py) is not installed, and the snapshots the recording script keeps.

The XML is nvidia-smi's own (its DTD ships with the driver as ``nvsmi_device_v*.dtd``): values are
text with their unit (``"345 MHz"``, ``"143771 MiB"``, ``"80.13 W"``, ``"16x"``), ``N/A`` when the
GPU does not report one. One call takes 0.1-0.5 s: run it at a 2 s interval or more.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from typing import Any, Callable

from latscope.telemetry.files import DeviceInfo
from latscope.telemetry.sample import GpuProcess, GpuSample

NVIDIA_SMI = ("nvidia-smi", "-q", "-x")
MIB = 2**20
_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
# <clocks_event_reasons> children (older drivers: <clocks_throttle_reasons>, clocks_throttle_*)
_REASONS = {"gpu_idle": "gpu_idle", "applications_clocks_setting": "applications_clocks",
            "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown",
            "hw_thermal_slowdown": "hw_thermal", "hw_power_brake_slowdown": "hw_power_brake",
            "sync_boost": "sync_boost", "sw_thermal_slowdown": "sw_thermal",
            "display_clocks_setting": "display_clocks"}


def _num(node: ET.Element | None, path: str) -> float | None:
    found = node.find(path) if node is not None else None
    match = _NUMBER.match(found.text or "") if found is not None else None
    return float(match.group(1)) if match else None


def from_xml(text: str, t_ns: int, wall_time: float) -> list[GpuSample]:
    """One ``GpuSample`` per ``<gpu>``; raises ``ET.ParseError`` on text that is not XML."""
    root = ET.fromstring(text)
    return [_gpu(i, g, t_ns, wall_time) for i, g in enumerate(root.findall("gpu"))]


def _gpu(index: int, g: ET.Element, t_ns: int, wall_time: float) -> GpuSample:
    minor = _num(g, "minor_number")
    link = "pci/pci_gpu_link_info"
    return GpuSample(
        gpu=int(minor) if minor is not None else index, t_ns=t_ns, wall_time=wall_time,
        util_pct=_num(g, "utilization/gpu_util"),
        mem_used_bytes=_mib(_num(g, "fb_memory_usage/used")),
        mem_total_bytes=_mib(_num(g, "fb_memory_usage/total")),
        power_w=(_num(g, "gpu_power_readings/instant_power_draw")
                 or _num(g, "gpu_power_readings/power_draw")
                 or _num(g, "power_readings/power_draw")),
        power_limit_w=(_num(g, "gpu_power_readings/current_power_limit")
                       or _num(g, "power_readings/enforced_power_limit")),
        sm_clock_mhz=_num(g, "clocks/sm_clock"), sm_clock_max_mhz=_num(g, "max_clocks/sm_clock"),
        mem_clock_mhz=_num(g, "clocks/mem_clock"),
        mem_clock_max_mhz=_num(g, "max_clocks/mem_clock"),
        temp_c=_num(g, "temperature/gpu_temp"),
        pcie_gen=_int(_num(g, f"{link}/pcie_gen/current_link_gen")),
        pcie_max_gen=_int(_num(g, f"{link}/pcie_gen/max_link_gen")),
        pcie_width=_int(_num(g, f"{link}/link_widths/current_link_width")),
        pcie_max_width=_int(_num(g, f"{link}/link_widths/max_link_width")),
        pcie_tx_MBps=_kb(_num(g, "pci/tx_util")), pcie_rx_MBps=_kb(_num(g, "pci/rx_util")),
        ecc_corrected=_int(_num(g, "ecc_errors/volatile/dram_correctable")),
        ecc_uncorrected=_int(_num(g, "ecc_errors/volatile/dram_uncorrectable")),
        reasons=_reasons(g), xids=[],
        processes=[GpuProcess(int(pid), _mib(_num(p, "used_memory")))
                   for p in g.findall("processes/process_info")
                   if (pid := _num(p, "pid")) is not None])


def _reasons(g: ET.Element) -> list[str] | None:
    """The clock-event reasons active now; None where the XML has no such section."""
    reasons = g.find("clocks_event_reasons")
    if reasons is None:
        reasons = g.find("clocks_throttle_reasons")
    if reasons is None:
        return None
    return [name for child in reasons for tag, name in _REASONS.items()
            if child.tag.endswith(f"_reason_{tag}") and child.text == "Active"]


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _mib(value: float | None) -> int | None:
    return None if value is None else int(value * MIB)


def _kb(value: float | None) -> float | None:
    return None if value is None else value * 1000 / 1e6


class NvidiaSmiSource:
    """``nvidia-smi -q -x`` per sample: NVIDIA telemetry without nvidia-ml-py."""

    def __init__(self, runner: Callable[..., Any] | None = None) -> None:
        self.runner = runner or subprocess.run
        self.name = "nvidia-smi -q -x (no nvidia-ml-py)"
        first = self.read()
        if not first:
            raise OSError("nvidia-smi -q -x lists no GPU")
        self.devices = [DeviceInfo(index=s.gpu) for s in first]

    def read(self) -> list[GpuSample]:
        import time

        t_ns, wall = time.perf_counter_ns(), time.time()
        done = self.runner(list(NVIDIA_SMI), capture_output=True, text=True, timeout=20,
                           check=False)
        if done.returncode != 0:
            raise OSError(f"nvidia-smi -q -x: exit {done.returncode}: "
                          f"{(done.stderr or done.stdout).strip()[:200]}")
        return from_xml(done.stdout, t_ns, wall)

    def close(self) -> None:
        pass
