"""AMD readings as ``GpuSample``s (latscope.telemetry.sample): the ROCm ``amdsmi`` Python library
first, else the JSON of ``amd-smi metric --json`` / ``amd-smi process --json``, else
``rocm-smi --json``.

Shapes, from AMD's own sources: ``amd-smi metric --json`` prints a list of per-GPU objects (ROCm
6.x) or ``{"gpu_data": [...]}`` (ROCm 7), each reading ``{"value": V, "unit": U}`` or ``"N/A"``
(ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py`` and CHANGELOG.md); ``rocm-smi --json`` prints
``{"card0": {"GPU use (%)": "12", ...}, "system": {...}}`` with every value a string
(ROCm/rocm_smi_lib ``python_smi_tools/rocm_smi.py``). Memory sizes in ``MB`` are MiB, as amd-smi
computes them (bytes // 1024 // 1024).
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any, Callable

from latscope.telemetry.sample import GpuProcess, GpuSample

MIB = 2**20
# PCIe transfer rate (GT/s) of each generation, to name the generation amd-smi reports as a speed.
_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
AMD_SMI_METRIC = ("amd-smi", "metric", "--json")
AMD_SMI_PROCESS = ("amd-smi", "process", "--json")
ROCM_SMI = ("rocm-smi", "--showuse", "--showmemuse", "--showmeminfo", "vram", "--showpower",
            "--showmaxpower", "--showtemp", "--showclocks", "--showbus", "--json")
CLI_TIMEOUT_S = 10.0


def _value(node: Any) -> float | None:
    """``{"value": 61, "unit": "C"}``, ``61``, ``"61.0"`` -> 61.0; ``"N/A"`` and the rest -> None."""
    if isinstance(node, dict):
        node = node.get("value")
    if isinstance(node, bool):
        return None
    if isinstance(node, (int, float)):
        return float(node)
    if isinstance(node, str):
        try:
            return float(node.strip())
        except ValueError:
            return None
    return None


def pcie_gen(gts: float | None) -> int | None:
    return None if gts is None else _GEN_BY_GTS.get(round(gts, 1))


def amd_smi_gpus(payload: Any) -> list[dict[str, Any]]:
    """The per-GPU objects of ``amd-smi metric|process --json``, whichever shape it printed."""
    if isinstance(payload, dict):
        payload = payload.get("gpu_data", [])
    return [g for g in payload or [] if isinstance(g, dict) and "gpu" in g]


def from_amd_smi_metric(payload: Any, t_ns: int, wall_time: float) -> list[GpuSample]:
    return [_metric_sample(g, t_ns, wall_time) for g in amd_smi_gpus(payload)]


def _metric_sample(g: dict[str, Any], t_ns: int, wall_time: float) -> GpuSample:
    usage, mem = _section(g, "usage"), _section(g, "mem_usage")
    power, temp = _section(g, "power"), _section(g, "temperature")
    pcie, ecc, clock = _section(g, "pcie"), _section(g, "ecc"), _section(g, "clock")
    gfx, memclk = _section(clock, "gfx_0"), _section(clock, "mem_0")
    status = power.get("throttle_status")
    return GpuSample(
        gpu=int(g["gpu"]), t_ns=t_ns, wall_time=wall_time,
        util_pct=_value(usage.get("gfx_activity")),
        mem_used_bytes=_bytes_of_mib(_value(mem.get("used_vram"))),
        mem_total_bytes=_bytes_of_mib(_value(mem.get("total_vram"))),
        power_w=_value(power.get("socket_power")),
        temp_c=_value(temp.get("hotspot")) or _value(temp.get("edge")),
        sm_clock_mhz=_value(gfx.get("clk")), sm_clock_max_mhz=_value(gfx.get("max_clk")),
        mem_clock_mhz=_value(memclk.get("clk")), mem_clock_max_mhz=_value(memclk.get("max_clk")),
        pcie_width=_int(_value(pcie.get("width"))), pcie_gen=pcie_gen(_value(pcie.get("speed"))),
        ecc_corrected=_int(_value(ecc.get("total_correctable_count"))),
        ecc_uncorrected=_int(_value(ecc.get("total_uncorrectable_count"))),
        reasons=(["throttled"] if status == "THROTTLED" else [] if status == "UNTHROTTLED"
                 else None),
        xids=[], processes=[])


def from_amd_smi_process(payload: Any) -> dict[int, list[GpuProcess]]:
    """GPU index -> its processes (pid, VRAM bytes) from ``amd-smi process --json``."""
    out: dict[int, list[GpuProcess]] = {}
    for g in amd_smi_gpus(payload):
        procs = []
        for entry in g.get("process_list") or []:
            info = entry.get("process_info") if isinstance(entry, dict) else None
            if not isinstance(info, dict) or not isinstance(info.get("pid"), int):
                continue  # "No running processes detected" is a string here
            vram = _value(_section(info, "memory_usage").get("vram_mem"))
            if vram is None:
                vram = _value(info.get("mem_usage"))
            procs.append(GpuProcess(info["pid"], _int(vram)))
        out[int(g["gpu"])] = procs
    return out


_CARD = re.compile(r"card(\d+)$")
_MHZ = re.compile(r"\(?(\d+(?:\.\d+)?)\s*Mhz\)?", re.IGNORECASE)
_PCIE_LEVEL = re.compile(r"(\d+(?:\.\d+)?)GT/s x(\d+)")


def from_rocm_smi(payload: Any, t_ns: int, wall_time: float) -> list[GpuSample]:
    out = []
    for card, d in sorted((payload or {}).items()):
        match = _CARD.match(card)
        if match and isinstance(d, dict):
            out.append(_rocm_smi_sample(int(match.group(1)), d, t_ns, wall_time))
    return out


def _rocm_smi_sample(gpu: int, d: dict[str, Any], t_ns: int, wall_time: float) -> GpuSample:
    sclk, mclk = (_MHZ.search(str(d.get(name, ""))) for name in ("sclk clock speed:",
                                                                  "mclk clock speed:"))
    link = _PCIE_LEVEL.search(str(d.get("pcie clock level", "")))
    return GpuSample(
        gpu=gpu, t_ns=t_ns, wall_time=wall_time, util_pct=_value(d.get("GPU use (%)")),
        mem_total_bytes=_int(_value(d.get("VRAM Total Memory (B)"))),
        mem_used_bytes=_int(_value(d.get("VRAM Total Used Memory (B)"))),
        power_w=(_value(d.get("Current Socket Graphics Package Power (W)"))
                 or _value(d.get("Average Graphics Package Power (W)"))),
        power_limit_w=_value(d.get("Max Graphics Package Power (W)")),
        temp_c=(_value(d.get("Temperature (Sensor junction) (C)"))
                or _value(d.get("Temperature (Sensor edge) (C)"))),
        sm_clock_mhz=float(sclk.group(1)) if sclk else None,
        mem_clock_mhz=float(mclk.group(1)) if mclk else None,
        pcie_gen=pcie_gen(float(link.group(1))) if link else None,
        pcie_width=int(link.group(2)) if link else None, xids=[], processes=[])


def run_json(argv: tuple[str, ...], runner: Callable[..., Any] = subprocess.run) -> Any:
    """One CLI call's JSON; raises OSError / ValueError / subprocess errors for the caller."""
    done = runner(list(argv), capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: exit {done.returncode}: "
                      f"{(done.stderr or done.stdout).strip()[:200]}")
    return json.loads(done.stdout)


class AmdSmiLibReader:
    """The ``amdsmi`` Python library (ships with ROCm): every call guarded like the NVML reader."""

    def __init__(self, amdsmi: Any) -> None:
        self.lib = amdsmi
        self._handles: list[Any] = []

    def open(self) -> int:
        self.lib.amdsmi_init()
        self._handles = list(self.lib.amdsmi_get_processor_handles())
        return len(self._handles)

    def close(self) -> None:
        try:
            self.lib.amdsmi_shut_down()
        except Exception:  # noqa: BLE001 -- closing: nothing left to record it in
            pass

    def read(self, t_ns: int, wall_time: float) -> list[GpuSample]:
        return [self._one(i, h, t_ns, wall_time) for i, h in enumerate(self._handles)]

    def _one(self, index: int, h: Any, t_ns: int, wall_time: float) -> GpuSample:
        lib = self.lib
        activity = self._call(lib, "amdsmi_get_gpu_activity", h) or {}
        vram = self._call(lib, "amdsmi_get_gpu_vram_usage", h) or {}
        power = self._call(lib, "amdsmi_get_power_info", h) or {}
        limit = _value(power.get("power_limit"))  # microwatts on newer ROCm, watts on older
        clk_type = getattr(getattr(lib, "AmdSmiClkType", None), "GFX", None)
        clock = self._call(lib, "amdsmi_get_clock_info", h, clk_type) or {}
        pcie = self._call(lib, "amdsmi_get_pcie_info", h) or {}
        static, metric = pcie.get("pcie_static") or {}, pcie.get("pcie_metric") or {}
        ecc = self._call(lib, "amdsmi_get_gpu_total_ecc_count", h) or {}
        procs = self._call(lib, "amdsmi_get_gpu_process_list", h) or []
        return GpuSample(
            gpu=index, t_ns=t_ns, wall_time=wall_time,
            util_pct=_value(activity.get("gfx_activity")),
            mem_used_bytes=_bytes_of_mib(_value(vram.get("vram_used"))),
            mem_total_bytes=_bytes_of_mib(_value(vram.get("vram_total"))),
            power_w=(_value(power.get("current_socket_power"))
                     or _value(power.get("average_socket_power"))),
            power_limit_w=None if limit is None else limit / 1e6 if limit > 1e5 else limit,
            sm_clock_mhz=_value(clock.get("clk")), sm_clock_max_mhz=_value(clock.get("max_clk")),
            temp_c=self._temperature(h),
            pcie_width=_int(_value(metric.get("pcie_width"))),
            pcie_max_width=_int(_value(static.get("max_pcie_width"))),
            pcie_gen=_gen_of_mts(_value(metric.get("pcie_speed"))),
            pcie_max_gen=_gen_of_mts(_value(static.get("max_pcie_speed"))),
            ecc_corrected=_int(_value(ecc.get("correctable_count"))),
            ecc_uncorrected=_int(_value(ecc.get("uncorrectable_count"))),
            xids=[], processes=[GpuProcess(p["pid"], (p.get("memory_usage") or {}).get("vram_mem"))
                                for p in procs
                                if isinstance(p, dict) and isinstance(p.get("pid"), int)])

    def _temperature(self, h: Any) -> float | None:
        kinds = getattr(self.lib, "AmdSmiTemperatureType", None)
        metric = getattr(getattr(self.lib, "AmdSmiTemperatureMetric", None), "CURRENT", None)
        sensor = getattr(kinds, "HOTSPOT", None)
        if sensor is None or metric is None:
            return None
        return _value(self._call(self.lib, "amdsmi_get_temp_metric", h, sensor, metric))

    @staticmethod
    def _call(lib: Any, name: str, *args: Any) -> Any:
        fn = getattr(lib, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 -- AmdSmiLibraryException: not on this GPU or ASIC
            return None


def _section(node: Any, key: str) -> dict[str, Any]:
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, dict) else {}


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _bytes_of_mib(mib: float | None) -> int | None:
    return None if mib is None else int(mib * MIB)


def _gen_of_mts(mts: float | None) -> int | None:
    """The PCIe generation of a transfer rate in MT/s (32000 is PCIe 5)."""
    return None if mts is None else pcie_gen(mts / 1000)
