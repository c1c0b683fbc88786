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

import msgspec

from latscope.telemetry.nvml import NvmlReading

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


def from_nvml(reading: NvmlReading, static: NvmlReading, wall_time: float,
              previous: NvmlReading | None = None) -> GpuSample:
    """A ``GpuSample`` from one raw ``NvmlReader.read()`` reading and its GPU's ``open()``
    facts (NVML's own keys: the recording script writes them as read); ``previous`` (the same
    GPU's previous raw reading) turns byte counters into MB/s."""
    got, fixed = reading.values, static.values
    power, limit, default = (_number(got.get("power.draw_mw")), _number(got.get("power.limit_mw")),
                             _number(fixed.get("power.default_limit_mw")))
    reasons = _number(got.get("clocks.event_reasons"))
    violations = {k.split(".", 1)[1][:-3]: v / 1e9 for k in got
                  if k.startswith("violation.") and (v := _number(got[k])) is not None}
    return GpuSample(
        gpu=reading.index, t_ns=reading.t_ns or 0, wall_time=wall_time,
        util_pct=_number(got.get("utilization.gpu_pct")),
        mem_used_bytes=_int(got.get("memory.used_bytes")),
        mem_total_bytes=_int(got.get("memory.total_bytes")),
        power_w=None if power is None else power / 1000.0,
        power_limit_w=None if limit is None else limit / 1000.0,
        power_default_limit_w=None if default is None else default / 1000.0,
        sm_clock_mhz=_number(got.get("clocks.sm_mhz")),
        sm_clock_max_mhz=_number(fixed.get("clocks.max.sm_mhz")),
        mem_clock_mhz=_number(got.get("clocks.mem_mhz")),
        mem_clock_max_mhz=_number(fixed.get("clocks.max.mem_mhz")),
        temp_c=_number(got.get("temperature.gpu_c")),
        reasons=None if reasons is None else reason_names(int(reasons)),
        violation_s=violations or None,
        pcie_gen=_int(got.get("pcie.gen")), pcie_width=_int(got.get("pcie.width")),
        pcie_max_gen=_int(fixed.get("pcie.max_gen")),
        pcie_max_width=_int(fixed.get("pcie.max_width")),
        pcie_tx_MBps=_pcie_rate(reading, previous, "tx"),
        pcie_rx_MBps=_pcie_rate(reading, previous, "rx"),
        ecc_corrected=_int(got.get("ecc.volatile_corrected")),
        ecc_uncorrected=_int(got.get("ecc.volatile_uncorrected")),
        xids=[x.xid for x in reading.xid_events or ()],
        processes=[GpuProcess(p.pid, p.used_bytes) for p in reading.processes or ()])


def _pcie_rate(reading: NvmlReading, previous: NvmlReading | None, way: str) -> float | None:
    """MB/s one way: from the byte counters between two readings, else NVML's sampled KB/s."""
    key = f"pcie.{way}_bytes_total"
    now, before = _number(reading.get(key)), _number(previous.get(key)) if previous else None
    t_now, t_before = reading.t_ns, previous.t_ns if previous else None
    if (now is not None and before is not None and t_now is not None and t_before is not None
            and t_now > t_before and now >= before):
        return (now - before) / ((t_now - t_before) / 1e9) / 1e6
    rate = _number(reading.get(f"pcie.{way}_kBps"))
    return None if rate is None else rate * 1000 / 1e6


def _number(value: object) -> int | float | None:
    """A raw reading that is a number (an int stays an int); None for anything else."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: object) -> int | None:
    number = _number(value)
    return None if number is None else int(number)
