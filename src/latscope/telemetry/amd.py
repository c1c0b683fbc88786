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


def from_amd_smi_metric(payload: Any, t_ns: int, wall_time: float) -> list[dict[str, Any]]:
    out = []
    for g in amd_smi_gpus(payload):
        s: dict[str, Any] = {"gpu": int(g["gpu"]), "t_ns": t_ns, "wall_time": wall_time}
        usage, mem = _section(g, "usage"), _section(g, "mem_usage")
        power, temp = _section(g, "power"), _section(g, "temperature")
        pcie, ecc, clock = _section(g, "pcie"), _section(g, "ecc"), _section(g, "clock")
        _put(s, "util_pct", _value(usage.get("gfx_activity")))
        for key, name in (("mem_used_bytes", "used_vram"), ("mem_total_bytes", "total_vram")):
            mib = _value(mem.get(name))
            _put(s, key, None if mib is None else int(mib * MIB))
        _put(s, "power_w", _value(power.get("socket_power")))
        _put(s, "temp_c", _value(temp.get("hotspot")) or _value(temp.get("edge")))
        gfx, memclk = _section(clock, "gfx_0"), _section(clock, "mem_0")
        _put(s, "sm_clock_mhz", _value(gfx.get("clk")))
        _put(s, "sm_clock_max_mhz", _value(gfx.get("max_clk")))
        _put(s, "mem_clock_mhz", _value(memclk.get("clk")))
        _put(s, "mem_clock_max_mhz", _value(memclk.get("max_clk")))
        _put(s, "pcie_width", _value(pcie.get("width")))
        _put(s, "pcie_gen", pcie_gen(_value(pcie.get("speed"))))
        _put(s, "ecc_corrected", _value(ecc.get("total_correctable_count")))
        _put(s, "ecc_uncorrected", _value(ecc.get("total_uncorrectable_count")))
        status = power.get("throttle_status")
        if status in ("THROTTLED", "UNTHROTTLED"):
            s["reasons"] = ["throttled"] if status == "THROTTLED" else []
        s["xids"], s["processes"] = [], []
        out.append(s)
    return out


def from_amd_smi_process(payload: Any) -> dict[int, list[dict[str, Any]]]:
    """GPU index -> its processes (pid, VRAM bytes) from ``amd-smi process --json``."""
    out: dict[int, list[dict[str, Any]]] = {}
    for g in amd_smi_gpus(payload):
        procs = []
        for entry in g.get("process_list") or []:
            info = entry.get("process_info") if isinstance(entry, dict) else None
            if not isinstance(info, dict) or not isinstance(info.get("pid"), int):
                continue  # "No running processes detected" is a string here
            vram = _value(_section(info, "memory_usage").get("vram_mem"))
            if vram is None:
                vram = _value(info.get("mem_usage"))
            procs.append({"pid": info["pid"], "used_bytes": None if vram is None else int(vram)})
        out[int(g["gpu"])] = procs
    return out


_CARD = re.compile(r"card(\d+)$")
_MHZ = re.compile(r"\(?(\d+(?:\.\d+)?)\s*Mhz\)?", re.IGNORECASE)
_PCIE_LEVEL = re.compile(r"(\d+(?:\.\d+)?)GT/s x(\d+)")


def from_rocm_smi(payload: Any, t_ns: int, wall_time: float) -> list[dict[str, Any]]:
    out = []
    for card, d in sorted((payload or {}).items()):
        match = _CARD.match(card)
        if not match or not isinstance(d, dict):
            continue
        s: dict[str, Any] = {"gpu": int(match.group(1)), "t_ns": t_ns, "wall_time": wall_time}
        _put(s, "util_pct", _value(d.get("GPU use (%)")))
        _put(s, "mem_total_bytes", _value(d.get("VRAM Total Memory (B)")))
        _put(s, "mem_used_bytes", _value(d.get("VRAM Total Used Memory (B)")))
        _put(s, "power_w", _value(d.get("Current Socket Graphics Package Power (W)"))
             or _value(d.get("Average Graphics Package Power (W)")))
        _put(s, "power_limit_w", _value(d.get("Max Graphics Package Power (W)")))
        _put(s, "temp_c", _value(d.get("Temperature (Sensor junction) (C)"))
             or _value(d.get("Temperature (Sensor edge) (C)")))
        for key, name in (("sm_clock_mhz", "sclk clock speed:"), ("mem_clock_mhz",
                                                                  "mclk clock speed:")):
            m = _MHZ.search(str(d.get(name, "")))
            _put(s, key, float(m.group(1)) if m else None)
        m = _PCIE_LEVEL.search(str(d.get("pcie clock level", "")))
        if m:
            _put(s, "pcie_gen", pcie_gen(float(m.group(1))))
            s["pcie_width"] = int(m.group(2))
        s["xids"], s["processes"] = [], []
        out.append(s)
    return out


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

    def read(self, t_ns: int, wall_time: float) -> list[dict[str, Any]]:
        return [self._one(i, h, t_ns, wall_time) for i, h in enumerate(self._handles)]

    def _one(self, index: int, h: Any, t_ns: int, wall_time: float) -> dict[str, Any]:
        lib = self.lib
        s: dict[str, Any] = {"gpu": index, "t_ns": t_ns, "wall_time": wall_time, "xids": []}
        activity = self._call(lib, "amdsmi_get_gpu_activity", h) or {}
        _put(s, "util_pct", _value(activity.get("gfx_activity")))
        vram = self._call(lib, "amdsmi_get_gpu_vram_usage", h) or {}
        for key, name in (("mem_used_bytes", "vram_used"), ("mem_total_bytes", "vram_total")):
            mib = _value(vram.get(name))
            _put(s, key, None if mib is None else int(mib * MIB))
        power = self._call(lib, "amdsmi_get_power_info", h) or {}
        _put(s, "power_w", _value(power.get("current_socket_power"))
             or _value(power.get("average_socket_power")))
        limit = _value(power.get("power_limit"))
        _put(s, "power_limit_w", None if limit is None else limit / 1e6 if limit > 1e5 else limit)
        clk_type = getattr(getattr(lib, "AmdSmiClkType", None), "GFX", None)
        clock = self._call(lib, "amdsmi_get_clock_info", h, clk_type) or {}
        _put(s, "sm_clock_mhz", _value(clock.get("clk")))
        _put(s, "sm_clock_max_mhz", _value(clock.get("max_clk")))
        self._temperature(s, h)
        pcie = self._call(lib, "amdsmi_get_pcie_info", h) or {}
        static, metric = pcie.get("pcie_static") or {}, pcie.get("pcie_metric") or {}
        _put(s, "pcie_width", _value(metric.get("pcie_width")))
        _put(s, "pcie_max_width", _value(static.get("max_pcie_width")))
        for key, node, name in (("pcie_gen", metric, "pcie_speed"),
                                ("pcie_max_gen", static, "max_pcie_speed")):
            mts = _value(node.get(name))  # MT/s: 32000 is PCIe 5
            _put(s, key, None if mts is None else pcie_gen(mts / 1000))
        ecc = self._call(lib, "amdsmi_get_gpu_total_ecc_count", h) or {}
        _put(s, "ecc_corrected", _value(ecc.get("correctable_count")))
        _put(s, "ecc_uncorrected", _value(ecc.get("uncorrectable_count")))
        procs = self._call(lib, "amdsmi_get_gpu_process_list", h) or []
        s["processes"] = [{"pid": p["pid"], "used_bytes": (p.get("memory_usage") or {})
                           .get("vram_mem")} for p in procs
                          if isinstance(p, dict) and isinstance(p.get("pid"), int)]
        return s

    def _temperature(self, s: dict[str, Any], h: Any) -> None:
        kinds = getattr(self.lib, "AmdSmiTemperatureType", None)
        metric = getattr(getattr(self.lib, "AmdSmiTemperatureMetric", None), "CURRENT", None)
        sensor = getattr(kinds, "HOTSPOT", None)
        if sensor is not None and metric is not None:
            _put(s, "temp_c", _value(self._call(self.lib, "amdsmi_get_temp_metric", h, sensor,
                                                metric)))

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


def _put(s: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        s[key] = int(value) if key.startswith(("pcie_", "ecc_")) else value
