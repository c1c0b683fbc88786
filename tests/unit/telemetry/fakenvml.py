"""A stand-in for the ``pynvml`` module (nvidia-ml-py), only for what no machine here can give:
a GPU. It mirrors pynvml's surface that latscope calls -- the function names, the
``NVMLError`` subclass per return code (``NVMLError_NotSupported``...), the returned structs'
attribute names -- with per-GPU values a test sets; a value that is an exception is raised, and
a function left out of ``missing`` is absent as in an older nvidia-ml-py.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

NOT_SUPPORTED, NO_PERMISSION, DRIVER_NOT_LOADED, TIMEOUT, LIBRARY_NOT_FOUND = 3, 4, 9, 10, 12
_NAMES = {NOT_SUPPORTED: ("NotSupported", "Not Supported"),
          NO_PERMISSION: ("NoPermission", "Insufficient Permissions"),
          DRIVER_NOT_LOADED: ("DriverNotLoaded", "Driver Not Loaded"),
          TIMEOUT: ("Timeout", "Timeout"),
          LIBRARY_NOT_FOUND: ("LibraryNotFound", "NVML Shared Library Not Found")}


class NVMLError(Exception):
    def __new__(cls, value: int):  # pynvml maps the code to its subclass the same way
        if cls is NVMLError:
            cls = _CLASSES.get(value, NVMLError)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _NAMES.get(self.value, ("Unknown", "Unknown Error"))[1]


_CLASSES = {code: type(f"NVMLError_{name}", (NVMLError,), {})
            for code, (name, _) in _NAMES.items()}


def error(code: int = NOT_SUPPORTED) -> NVMLError:
    return NVMLError(code)


@dataclass
class FakeGpu:
    """One GPU's answers, keyed like the reading it produces; an NVMLError value is raised."""
    name: str = "NVIDIA H200"
    util: tuple[int, int] = (97, 60)  # gpu %, memory %
    memory: tuple[int, int] = (130 * 2**30, 143 * 2**30)  # used, total bytes
    power_mw: Any = 650_000
    limit_mw: Any = 700_000
    clocks: dict[int, Any] = field(default_factory=lambda: {0: 1980, 1: 1980, 2: 3201})
    max_clocks: dict[int, Any] = field(default_factory=lambda: {0: 1980, 1: 1980, 2: 3201})
    temperature_c: Any = 61
    reasons: Any = 0
    pcie: tuple[Any, Any, Any, Any] = (5, 16, 5, 16)  # gen, width, max gen, max width
    pcie_kBps: Any = error()
    ecc: Any = 0
    violation_ns: dict[int, Any] = field(default_factory=dict)
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, used bytes)
    xids: list[int] = field(default_factory=list)
    fields: dict[int, Any] = field(default_factory=dict)  # field id -> value (else NotSupported)


def _answer(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


def make(gpus: list[FakeGpu], *, init_error: int | None = None,
         missing: tuple[str, ...] = ()) -> types.ModuleType:
    """A module with pynvml's names, answering for ``gpus``."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.nvmlMemory_v2 = 0x02000028
    m.calls = []
    m.shutdowns = 0
    pending = {i: list(g.xids) for i, g in enumerate(gpus)}

    def init() -> None:
        if init_error is not None:
            raise NVMLError(init_error)

    def shutdown() -> None:
        m.shutdowns += 1

    def gpu(handle: int) -> FakeGpu:
        return gpus[handle]

    def memory(h: int, version: int | None = None):
        used, total = gpu(h).memory
        if version is not None:
            return types.SimpleNamespace(used=used, total=total, free=total - used,
                                         reserved=512 * 2**20, version=version)
        return types.SimpleNamespace(used=used, total=total, free=total - used)

    def fields(h: int, ids: list[int]):
        out = []
        for fid in ids:
            value = gpu(h).fields.get(fid)
            ok = value is not None
            out.append(types.SimpleNamespace(
                fieldId=fid, nvmlReturn=0 if ok else NOT_SUPPORTED, valueType=3,
                value=types.SimpleNamespace(ullVal=value if ok else 0)))
        return out

    def wait(event_set: int, timeout_ms: int):
        if not pending[event_set]:
            raise NVMLError(TIMEOUT)
        return types.SimpleNamespace(eventType=0x8, eventData=pending[event_set].pop(0))

    def procs(h: int):
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used)
                for pid, used in gpu(h).processes]

    table = {
        "nvmlInit": init, "nvmlShutdown": shutdown,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlSystemGetDriverVersion": lambda: "570.124.06",
        "nvmlSystemGetNVMLVersion": lambda: "12.570.124.06",
        "nvmlSystemGetCudaDriverVersion": lambda: 12080,
        "nvmlDeviceGetName": lambda h: gpu(h).name,
        "nvmlDeviceGetUUID": lambda h: f"GPU-fake-{h}",
        "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0".encode()),
        "nvmlDeviceGetMaxClockInfo": lambda h, c: _answer(gpu(h).max_clocks[c]),
        "nvmlDeviceGetClockInfo": lambda h, c: _answer(gpu(h).clocks[c]),
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: _answer(gpu(h).pcie[2]),
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": lambda h: _answer(gpu(h).pcie[2]),
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: _answer(gpu(h).pcie[3]),
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: _answer(gpu(h).pcie[0]),
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: _answer(gpu(h).pcie[1]),
        "nvmlDeviceGetPcieThroughput": lambda h, c: _answer(gpu(h).pcie_kBps),
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700_000,
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: [200_000, 700_000],
        "nvmlDeviceGetTemperatureThreshold": lambda h, t: {0: 92, 1: 89, 3: 87}.get(t, 0),
        "nvmlDeviceGetEccMode": lambda h: [1, 1],
        "nvmlDeviceGetMigMode": lambda h: _answer(error()),
        "nvmlDeviceGetComputeMode": lambda h: 0,
        "nvmlEventSetCreate": lambda: len(m.event_sets),
        "nvmlDeviceRegisterEvents": lambda h, t, s: m.event_sets.append(h),
        "nvmlEventSetWait": lambda s, ms: wait(m.event_sets[s], ms),
        "nvmlEventSetFree": lambda s: None,
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(
            gpu=gpu(h).util[0], memory=gpu(h).util[1]),
        "nvmlDeviceGetMemoryInfo": memory,
        "nvmlDeviceGetPowerUsage": lambda h: _answer(gpu(h).power_mw),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: _answer(gpu(h).limit_mw),
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: 1_000_000,
        "nvmlDeviceGetTemperature": lambda h, s: _answer(gpu(h).temperature_c),
        "nvmlDeviceGetPerformanceState": lambda h: 0,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: _answer(gpu(h).reasons),
        "nvmlDeviceGetViolationStatus": lambda h, p: types.SimpleNamespace(
            referenceTime=0, violationTime=_answer(gpu(h).violation_ns.get(p, 0))),
        "nvmlDeviceGetTotalEccErrors": lambda h, e, c: _answer(gpu(h).ecc),
        "nvmlDeviceGetFieldValues": fields,
        "nvmlDeviceGetComputeRunningProcesses": procs,
        "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
    }
    m.event_sets = []
    for name, fn in table.items():
        if name not in missing:
            setattr(m, name, _counted(m, name, fn))
    return m


def _counted(m: types.ModuleType, name: str, fn: Any) -> Any:
    def call(*args: Any) -> Any:
        m.calls.append(name)
        return fn(*args)
    return call
