"""One GPU at one instant, in one form whatever the vendor: what the sampler writes and the rules read.

A ``GpuSample`` dict has ``gpu`` (the index the vendor tool gives it, i.e. the host's ordinal,
not the server's CUDA ordinal), ``t_ns`` (``perf_counter_ns``, the client's clock),
``wall_time``, and whichever of these the driver answered (a key is absent, never zero, when it
did not):

=====================  ==================================================================
``util_pct``           time a kernel ran, over the driver's last sample period (NVML
                       ``utilization.gpu``; AMD ``gfx_activity``): busy, not SM occupancy
``mem_used_bytes``     device memory used / ``mem_total_bytes``
``power_w``            board power / ``power_limit_w`` the enforced limit
                       (``power_default_limit_w`` the board's default)
``sm_clock_mhz``       SM (AMD: GFX) clock / ``sm_clock_max_mhz``; ``mem_clock_mhz`` likewise
``temp_c``             GPU (AMD: hotspot) temperature
``reasons``            why clocks are held down now (names in ``REASON_BITS``)
``violation_s``        cumulative seconds clocks were held down, by cause (NVML only)
``pcie_gen``           current PCIe generation / width, ``pcie_max_gen`` / ``pcie_max_width``
``pcie_tx_MBps``       PCIe traffic, MB/s (from byte counters between samples, else NVML's
                       20 ms sampled throughput)
``ecc_corrected``      volatile ECC error counts (since driver load) / ``ecc_uncorrected``
``xids``               XID event codes delivered since the previous sample
``processes``          ``[{"pid", "used_bytes"}]`` holding a context on this GPU
=====================  ==================================================================
"""

from __future__ import annotations

from typing import Any

# nvmlClocksEventReason* bits (nvml.h); HW slowdown is a thermal or power-brake event.
REASON_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
    0x100: "display_clocks",
}
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake"})
THERMAL_REASONS = frozenset({"sw_thermal", "hw_thermal"})
# Reasons that hold the clock below its maximum because of a limit (not idle, not a setting).
LIMIT_REASONS = POWER_REASONS | THERMAL_REASONS | {"hw_slowdown", "throttled"}


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in REASON_BITS.items() if bits & bit]


def from_nvml(reading: dict[str, Any], static: dict[str, Any], wall_time: float,
              previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``GpuSample`` from one ``NvmlReader.read()`` reading and its GPU's ``open()`` facts;
    ``previous`` (the same GPU's previous raw reading) turns byte counters into MB/s."""
    s: dict[str, Any] = {"gpu": reading["index"], "t_ns": reading["t_ns"], "wall_time": wall_time}
    _copy(s, reading, {"utilization.gpu_pct": "util_pct", "memory.used_bytes": "mem_used_bytes",
                       "memory.total_bytes": "mem_total_bytes", "clocks.sm_mhz": "sm_clock_mhz",
                       "clocks.mem_mhz": "mem_clock_mhz", "temperature.gpu_c": "temp_c",
                       "pcie.gen": "pcie_gen", "pcie.width": "pcie_width",
                       "ecc.volatile_corrected": "ecc_corrected",
                       "ecc.volatile_uncorrected": "ecc_uncorrected"})
    _copy(s, static, {"clocks.max.sm_mhz": "sm_clock_max_mhz",
                      "clocks.max.mem_mhz": "mem_clock_max_mhz", "pcie.max_gen": "pcie_max_gen",
                      "pcie.max_width": "pcie_max_width"})
    for key, out in (("power.draw_mw", "power_w"), ("power.limit_mw", "power_limit_w")):
        if _num(reading.get(key)):
            s[out] = reading[key] / 1000.0
    if _num(static.get("power.default_limit_mw")):
        s["power_default_limit_w"] = static["power.default_limit_mw"] / 1000.0
    if _num(reading.get("clocks.event_reasons")):
        s["reasons"] = reason_names(int(reading["clocks.event_reasons"]))
    violations = {k.split(".", 1)[1][:-3]: reading[k] / 1e9 for k in reading
                  if k.startswith("violation.") and _num(reading[k])}
    if violations:
        s["violation_s"] = violations
    s.update(_pcie_rates(reading, previous))
    s["xids"] = [x["xid"] for x in reading.get("xid_events") or ()]
    s["processes"] = [{"pid": p["pid"], "used_bytes": p.get("used_bytes")}
                      for p in reading.get("processes") or ()]
    return s


def _pcie_rates(reading: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, float]:
    out = {}
    for way in ("tx", "rx"):
        key = f"pcie.{way}_bytes_total"
        if (previous is not None and _num(reading.get(key)) and _num(previous.get(key))
                and reading["t_ns"] > previous["t_ns"] and reading[key] >= previous[key]):
            seconds = (reading["t_ns"] - previous["t_ns"]) / 1e9
            out[f"pcie_{way}_MBps"] = (reading[key] - previous[key]) / seconds / 1e6
        elif _num(reading.get(f"pcie.{way}_kBps")):
            out[f"pcie_{way}_MBps"] = reading[f"pcie.{way}_kBps"] * 1000 / 1e6
    return out


def _copy(out: dict[str, Any], src: dict[str, Any], names: dict[str, str]) -> None:
    for key, name in names.items():
        if _num(src.get(key)):
            out[name] = src[key]


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
