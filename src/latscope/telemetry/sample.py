"""One GPU at one instant, in one form whatever the vendor: what the sampler writes and the rules read.

A ``GpuSample`` has ``gpu`` (the index the vendor tool gives it, i.e. the host's ordinal, not
the server's CUDA ordinal), ``t_ns`` (``perf_counter_ns``, the client's clock), ``wall_time``,
and whichever of these the driver answered (None when it did not: the key is then absent from
``samples.jsonl``, never zero):

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
``processes``          ``GpuProcess`` (pid, used_bytes) holding a context on this GPU
=====================  ==================================================================
"""

from __future__ import annotations

from typing import Any

import msgspec

# a reading as the driver gave it: an int stays an int in the JSON (95, not 95.0)
Number = int | float


class GpuProcess(msgspec.Struct):
    """A process holding a context on a GPU; ``used_bytes`` None when the driver does not say."""

    pid: int
    used_bytes: int | None


class GpuSample(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One GPU at one instant (the table above). A reading the driver did not answer is None,
    and left out of ``samples.jsonl`` (absent, never zero); ``reasons`` [] is a reading (no
    limit active), None none. The producers always set ``xids`` and ``processes``."""

    gpu: int
    t_ns: int
    wall_time: float
    util_pct: Number | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: Number | None = None
    power_limit_w: Number | None = None
    power_default_limit_w: Number | None = None
    sm_clock_mhz: Number | None = None
    sm_clock_max_mhz: Number | None = None
    mem_clock_mhz: Number | None = None
    mem_clock_max_mhz: Number | None = None
    temp_c: Number | None = None
    reasons: list[str] | None = None
    violation_s: dict[str, float] | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    pcie_tx_MBps: float | None = None
    pcie_rx_MBps: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    xids: list[int] | None = None
    processes: list[GpuProcess] | None = None

    def mem_used_frac(self) -> float | None:
        """Memory used as a share of the device's, where both were read."""
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return self.mem_used_bytes / self.mem_total_bytes

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
              previous: dict[str, Any] | None = None) -> GpuSample:
    """A ``GpuSample`` from one raw ``NvmlReader.read()`` reading and its GPU's ``open()``
    facts (both NVML's own keys: the recording script writes them as read); ``previous`` (the
    same GPU's previous raw reading) turns byte counters into MB/s."""
    found = _numbers(reading, {
        "utilization.gpu_pct": "util_pct", "memory.used_bytes": "mem_used_bytes",
        "memory.total_bytes": "mem_total_bytes", "clocks.sm_mhz": "sm_clock_mhz",
        "clocks.mem_mhz": "mem_clock_mhz", "temperature.gpu_c": "temp_c",
        "pcie.gen": "pcie_gen", "pcie.width": "pcie_width",
        "ecc.volatile_corrected": "ecc_corrected", "ecc.volatile_uncorrected": "ecc_uncorrected"})
    found.update(_numbers(static, {
        "clocks.max.sm_mhz": "sm_clock_max_mhz", "clocks.max.mem_mhz": "mem_clock_max_mhz",
        "pcie.max_gen": "pcie_max_gen", "pcie.max_width": "pcie_max_width"}))
    for key, out in (("power.draw_mw", "power_w"), ("power.limit_mw", "power_limit_w")):
        if _num(reading.get(key)):
            found[out] = reading[key] / 1000.0
    if _num(static.get("power.default_limit_mw")):
        found["power_default_limit_w"] = static["power.default_limit_mw"] / 1000.0
    if _num(reading.get("clocks.event_reasons")):
        found["reasons"] = reason_names(int(reading["clocks.event_reasons"]))
    violations = {k.split(".", 1)[1][:-3]: reading[k] / 1e9 for k in reading
                  if k.startswith("violation.") and _num(reading[k])}
    if violations:
        found["violation_s"] = violations
    found.update(_pcie_rates(reading, previous))
    return GpuSample(
        gpu=reading["index"], t_ns=reading["t_ns"], wall_time=wall_time, **found,
        xids=[x["xid"] for x in reading.get("xid_events") or ()],
        processes=[GpuProcess(p["pid"], p.get("used_bytes"))
                   for p in reading.get("processes") or ()])


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


def _numbers(src: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The numbers of ``src`` under their sample names (a key that is no number is left out)."""
    return {name: src[key] for key, name in names.items() if _num(src.get(key))}


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
