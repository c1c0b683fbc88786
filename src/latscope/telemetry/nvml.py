"""Raw NVML readings, GPU by GPU: every call guarded, nothing interpreted.

The standard library only, plus the ``pynvml`` module (nvidia-ml-py) handed in: this file is loaded
on its own by ``benchmarks/record_gpu_telemetry.py`` on hosts without latscope's dependencies, and
a fake module stands in for it in the tests. A call the driver does not support or forbids
(``NVMLError``), or a function an older nvidia-ml-py lacks, lands in the reading's ``errors`` under
the field's name and never stops the others.

Units are NVML's, named in the keys: ``_mw`` milliwatts, ``_mj`` millijoules, ``_mhz``, ``_c``
degrees Celsius, ``_kBps`` KB/s, ``_ns`` nanoseconds. ``memory.used_bytes`` is NVML's
``used`` (``memory.version`` 2 excludes the driver's reservation, 1 includes it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

# Field ids of nvmlDeviceGetFieldValues (nvml.h; pynvml names NVML_FI_DEV_*): numbers, because
# older nvidia-ml-py releases lack some of the names and the values never change.
FIELDS = {
    "temperature.memory_c": 82,          # NVML_FI_DEV_MEMORY_TEMP
    "energy.field_mj": 83,               # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    "pcie.replay_count": 94,             # NVML_FI_DEV_PCIE_REPLAY_COUNTER
    "pcie.correctable_errors": 173,      # NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS
    "pcie.tx_bytes_total": 197,          # NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    "pcie.rx_bytes_total": 198,          # NVML_FI_DEV_PCIE_COUNT_RX_BYTES
}
# nvmlDeviceGetViolationStatus policies (NVML_PERF_POLICY_*): cumulative ns the clocks were held
# down for each reason, so the share of an interval spent limited is a difference of two reads.
VIOLATIONS = {"power": 0, "thermal": 1, "sync_boost": 2, "board_limit": 3,
              "low_utilization": 4, "reliability": 5}
_CLOCKS = {"graphics": 0, "sm": 1, "mem": 2}  # NVML_CLOCK_GRAPHICS / _SM / _MEM
_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError


# A raw reading: a number, a name, NVML's own pair ([current, pending] of ``ecc.mode``), or None
# where the call answered without a value
Scalar = int | float | str | list[int] | None


class NvmlUnavailable(Exception):
    """NVML cannot be used here: no library, no driver, no permission, or no GPU."""


@dataclass(slots=True)
class NvmlProcess:
    pid: int
    used_bytes: int | None
    kind: str  # compute | graphics


@dataclass(slots=True)
class XidEvent:
    xid: int
    event_type: int


@dataclass(slots=True)
class NvmlReading:
    """One GPU's raw readings under NVML's own names (``clocks.sm_mhz``, ``power.draw_mw``):
    a device's static facts (``open``) or one tick's (``read``: ``t_ns`` set). ``errors`` maps
    each refused call's name to why; ``call_us`` each call's duration (``timings``)."""

    index: int
    values: dict[str, Scalar] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    t_ns: int | None = None
    call_us: dict[str, float] | None = None
    processes: list[NvmlProcess] | None = None
    xid_events: list[XidEvent] | None = None
    read_ms: float | None = None

    def get(self, key: str) -> Scalar | None:
        return self.values.get(key)

    def to_dict(self) -> dict[str, Any]:
        """As the recording script writes it: one flat object, NVML's keys beside these."""
        out: dict[str, Any] = {"index": self.index}
        if self.t_ns is not None:
            out["t_ns"] = self.t_ns
        out["errors"] = self.errors
        if self.call_us is not None:
            out["call_us"] = self.call_us
        out.update(self.values)
        if self.processes is not None:
            out["processes"] = [{"pid": p.pid, "used_bytes": p.used_bytes, "kind": p.kind}
                                for p in self.processes]
        if self.xid_events is not None:
            out["xid_events"] = [{"xid": x.xid, "event_type": x.event_type}
                                 for x in self.xid_events]
        if self.read_ms is not None:
            out["read_ms"] = self.read_ms
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NvmlReading:
        """A recorded reading (``to_dict``'s object) read back."""
        own = {"index", "t_ns", "errors", "call_us", "processes", "xid_events", "read_ms"}
        procs, xids = data.get("processes"), data.get("xid_events")
        return cls(int(data["index"]), {k: v for k, v in data.items() if k not in own},
                   dict(data.get("errors") or {}), data.get("t_ns"), data.get("call_us"),
                   None if procs is None else [NvmlProcess(p["pid"], p.get("used_bytes"),
                                                           p.get("kind", ""))
                                               for p in procs],
                   None if xids is None else [XidEvent(x["xid"], x.get("event_type", 0))
                                              for x in xids],
                   data.get("read_ms"))


@dataclass(slots=True)
class NvmlSystem:
    """Driver, NVML and CUDA driver versions, and the calls that refused."""

    values: dict[str, Scalar] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def error_text(exc: BaseException) -> str:
    """``NVMLError_NotSupported: Not Supported``: the class names the NVML return code."""
    return f"{type(exc).__name__}: {exc}"


class NvmlReader:
    """``open()`` once (static facts per GPU), ``read()`` at each tick, ``close()`` at the end."""

    def __init__(self, nvml: Any, *, timings: bool = False,
                 pcie_throughput: bool = True) -> None:
        self.nvml = nvml
        self.timings = timings  # record each call's duration (what a sampler can afford)
        # nvmlDeviceGetPcieThroughput samples for 20 ms per call; the byte counters are free
        self.pcie_throughput = pcie_throughput
        self._handles: list[Any] = []
        self._event_sets: list[Any] = []

    # -- lifecycle -----------------------------------------------------------------------------
    def open(self) -> list[NvmlReading]:
        try:
            self.nvml.nvmlInit()
        except Exception as exc:  # NVMLError, or OSError from a missing libnvidia-ml.so
            raise NvmlUnavailable(error_text(exc)) from exc
        try:
            count = self.nvml.nvmlDeviceGetCount()
        except Exception as exc:
            self.close()
            raise NvmlUnavailable(error_text(exc)) from exc
        devices = []
        for index in range(count):
            reading = NvmlReading(index)
            handle = self._get(reading, "handle", self.nvml.nvmlDeviceGetHandleByIndex, index)
            self._handles.append(handle)
            if handle is not None:
                self._static(reading, handle)
            devices.append(reading)
        return devices

    def close(self) -> None:
        for event_set in self._event_sets:
            if event_set is not None:
                try:
                    self.nvml.nvmlEventSetFree(event_set)
                except Exception:  # noqa: BLE001 -- closing: nothing left to record it in
                    pass
        self._event_sets = []
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass

    def system(self) -> NvmlSystem:
        """Driver, NVML and CUDA driver versions."""
        out = NvmlReading(-1)
        for key, name in (("driver_version", "nvmlSystemGetDriverVersion"),
                          ("nvml_version", "nvmlSystemGetNVMLVersion"),
                          ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")):
            self._put(out, key, name)
        return NvmlSystem(out.values, out.errors)

    # -- readings ------------------------------------------------------------------------------
    def read(self) -> list[NvmlReading]:
        """One reading per GPU, in index order; ``t_ns`` on ``time.perf_counter_ns``."""
        out = []
        for index, handle in enumerate(self._handles):
            start = time.perf_counter_ns()
            reading = NvmlReading(index, t_ns=start, call_us={} if self.timings else None)
            if handle is not None:
                self._dynamic(reading, handle, index)
            reading.read_ms = (time.perf_counter_ns() - start) / 1e6
            out.append(reading)
        return out

    def _static(self, r: NvmlReading, h: Any) -> None:
        n = self.nvml
        self._put(r, "name", "nvmlDeviceGetName", h)
        self._put(r, "uuid", "nvmlDeviceGetUUID", h)
        pci = self._get(r, "pci", getattr(n, "nvmlDeviceGetPciInfo", None), h)
        if pci is not None:
            r.values["pci.bus_id"] = _text(getattr(pci, "busId", ""))
        for clock, cid in _CLOCKS.items():
            self._put(r, f"clocks.max.{clock}_mhz", "nvmlDeviceGetMaxClockInfo", h, cid)
        self._put(r, "pcie.max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", h)
        self._put(r, "pcie.gpu_max_gen", "nvmlDeviceGetGpuMaxPcieLinkGeneration", h)
        self._put(r, "pcie.max_width", "nvmlDeviceGetMaxPcieLinkWidth", h)
        self._put(r, "power.default_limit_mw", "nvmlDeviceGetPowerManagementDefaultLimit", h)
        limits = self._get(r, "power.limit_constraints_mw",
                           getattr(n, "nvmlDeviceGetPowerManagementLimitConstraints", None), h)
        if limits is not None:
            r.values["power.limit_constraints_mw"] = list(limits)
        self._put(r, "temperature.slowdown_c", "nvmlDeviceGetTemperatureThreshold", h, 1)
        self._put(r, "temperature.shutdown_c", "nvmlDeviceGetTemperatureThreshold", h, 0)
        self._put(r, "temperature.gpu_max_c", "nvmlDeviceGetTemperatureThreshold", h, 3)
        ecc = self._get(r, "ecc.mode", getattr(n, "nvmlDeviceGetEccMode", None), h)
        if ecc is not None:
            r.values["ecc.mode"] = list(ecc)  # [current, pending], 1 = enabled
        self._put(r, "mig.mode", "nvmlDeviceGetMigMode", h)
        self._put(r, "compute_mode", "nvmlDeviceGetComputeMode", h)
        self._register_xid(r, h)

    def _dynamic(self, r: NvmlReading, h: Any, index: int) -> None:
        n = self.nvml
        util = self._get(r, "utilization", getattr(n, "nvmlDeviceGetUtilizationRates", None), h)
        if util is not None:
            r.values["utilization.gpu_pct"] = util.gpu
            r.values["utilization.memory_pct"] = util.memory
        self._memory(r, h)
        self._put(r, "power.draw_mw", "nvmlDeviceGetPowerUsage", h)
        self._put(r, "power.limit_mw", "nvmlDeviceGetEnforcedPowerLimit", h)
        self._put(r, "energy.total_mj", "nvmlDeviceGetTotalEnergyConsumption", h)
        for clock, cid in _CLOCKS.items():
            self._put(r, f"clocks.{clock}_mhz", "nvmlDeviceGetClockInfo", h, cid)
        self._put(r, "temperature.gpu_c", "nvmlDeviceGetTemperature", h, 0)
        self._put(r, "pstate", "nvmlDeviceGetPerformanceState", h)
        reasons = (getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
                   or getattr(n, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        self._put_fn(r, "clocks.event_reasons", reasons, h)
        for policy, pid in VIOLATIONS.items():
            v = self._get(r, f"violation.{policy}_ns",
                          getattr(n, "nvmlDeviceGetViolationStatus", None), h, pid)
            if v is not None:
                r.values[f"violation.{policy}_ns"] = v.violationTime
        self._put(r, "pcie.gen", "nvmlDeviceGetCurrPcieLinkGeneration", h)
        self._put(r, "pcie.width", "nvmlDeviceGetCurrPcieLinkWidth", h)
        if self.pcie_throughput:
            self._put(r, "pcie.tx_kBps", "nvmlDeviceGetPcieThroughput", h, 0)  # _TX_BYTES
            self._put(r, "pcie.rx_kBps", "nvmlDeviceGetPcieThroughput", h, 1)  # _RX_BYTES
        for key, etype, counter in (("ecc.volatile_corrected", 0, 0),
                                    ("ecc.volatile_uncorrected", 1, 0),
                                    ("ecc.aggregate_corrected", 0, 1),
                                    ("ecc.aggregate_uncorrected", 1, 1)):
            self._put(r, key, "nvmlDeviceGetTotalEccErrors", h, etype, counter)
        self._fields(r, h)
        self._processes(r, h)
        self._xid(r, index)

    def _memory(self, r: NvmlReading, h: Any) -> None:
        fn = getattr(self.nvml, "nvmlDeviceGetMemoryInfo", None)
        version2 = getattr(self.nvml, "nvmlMemory_v2", None)
        mem = None
        if version2 is not None:
            mem = self._get(r, "memory", fn, h, version2)
            if mem is not None:
                r.values["memory.version"] = 2
                r.values["memory.reserved_bytes"] = getattr(mem, "reserved", None)
        if mem is None:
            mem = self._get(r, "memory", fn, h)
            if mem is not None:
                r.values["memory.version"] = 1
                r.errors.pop("memory", None)
        if mem is not None:
            r.values["memory.used_bytes"] = mem.used
            r.values["memory.total_bytes"] = mem.total
            r.values["memory.free_bytes"] = mem.free

    def _fields(self, r: NvmlReading, h: Any) -> None:
        keys = list(FIELDS)
        values = self._get(r, "fields", getattr(self.nvml, "nvmlDeviceGetFieldValues", None),
                           h, [FIELDS[k] for k in keys])
        for key, value in zip(keys, values or ()):
            if getattr(value, "nvmlReturn", 1) != 0:
                r.errors[key] = f"nvmlReturn {getattr(value, 'nvmlReturn', '?')}"
                continue
            attr = _VALUE_ATTR.get(getattr(value, "valueType", -1))
            r.values[key] = getattr(value.value, attr) if attr else None

    def _processes(self, r: NvmlReading, h: Any) -> None:
        procs = []
        for kind, name in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                           ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            found = self._get(r, f"processes.{kind}", getattr(self.nvml, name, None), h)
            for p in found or ():
                procs.append(NvmlProcess(p.pid, getattr(p, "usedGpuMemory", None), kind))
        r.processes = procs

    def _register_xid(self, r: NvmlReading, h: Any) -> None:
        event_set = self._get(r, "events.xid", getattr(self.nvml, "nvmlEventSetCreate", None))
        if event_set is not None:
            ok = self._get(r, "events.xid", getattr(self.nvml, "nvmlDeviceRegisterEvents", None),
                           h, _XID_EVENT, event_set, none_ok=True)
            if ok is _FAILED:
                self._free(event_set)
                event_set = None
        r.values["events.xid"] = "registered" if event_set is not None else "unavailable"
        self._event_sets.append(event_set)

    def _free(self, event_set: Any) -> None:
        try:
            self.nvml.nvmlEventSetFree(event_set)
        except Exception:  # noqa: BLE001 -- the failure that matters is already recorded
            pass

    def _xid(self, r: NvmlReading, index: int) -> None:
        """XID events since the last read (a 0 ms wait raises NVMLError_Timeout when none)."""
        event_set = self._event_sets[index] if index < len(self._event_sets) else None
        if event_set is None:
            return
        xids = []
        for _ in range(64):  # a storm of events must not stall the sampler
            try:
                data = self.nvml.nvmlEventSetWait(event_set, 0)
            except Exception:  # noqa: BLE001 -- Timeout: nothing pending
                break
            xids.append(XidEvent(int(data.eventData), int(data.eventType)))
        r.xid_events = xids

    # -- guarded calls -------------------------------------------------------------------------
    def _put(self, r: NvmlReading, key: str, fn_name: str, *args: Any) -> None:
        self._put_fn(r, key, getattr(self.nvml, fn_name, None), *args)

    def _put_fn(self, r: NvmlReading, key: str, fn: Callable[..., Any] | None,
                *args: Any) -> None:
        value = self._get(r, key, fn, *args)
        if value is not None:
            r.values[key] = _text(value) if isinstance(value, bytes) else value

    def _get(self, r: NvmlReading, key: str, fn: Callable[..., Any] | None, *args: Any,
             none_ok: bool = False) -> Any:
        if fn is None:
            r.errors[key] = "not in this nvidia-ml-py"
            return _FAILED if none_ok else None
        start = time.perf_counter_ns()
        try:
            value = fn(*args)
        except Exception as exc:  # NVMLError_* (NotSupported, NoPermission, ...) and friends
            r.errors[key] = error_text(exc)
            return _FAILED if none_ok else None
        finally:
            if r.call_us is not None:
                r.call_us[key] = round((time.perf_counter_ns() - start) / 1e3, 1)
        return value


_FAILED = object()


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
