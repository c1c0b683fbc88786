"""Where the GPU readings come from on this host: NVML first (``nvidia-smi -q -x`` where the
driver is there but nvidia-ml-py is not), then AMD's library or tools.

``open_source()`` returns the first that answers, or raises ``TelemetryUnavailable`` whose text
is the one line a user sees: which of no library, no driver, no permission, no GPU, for each
vendor tried. Each source's ``read()`` is a blocking call (the sampler runs it in a thread) that
returns ``GpuSample``s (latscope.telemetry.sample) and never raises for a field the driver
lacks.
"""

from __future__ import annotations

import importlib
import shutil
import time
from typing import Any, Callable, Protocol

from latscope.errors import LatscopeError
from latscope.telemetry import amd
from latscope.telemetry.files import DeviceInfo
from latscope.telemetry.nvml import NvmlReader, NvmlReading, NvmlUnavailable
from latscope.telemetry.nvsmi import NvidiaSmiSource
from latscope.telemetry.sample import GpuSample, from_nvml

# NVML return codes (nvml.h) that say why there is no telemetry, in a user's words.
_NVML_WHY = {"LibraryNotFound": "no NVIDIA driver (libnvidia-ml.so)",
             "DriverNotLoaded": "NVIDIA driver not loaded",
             "NoPermission": "no permission to read the NVIDIA GPUs",
             "Uninitialized": "NVML did not initialise"}
NO_AMD = "no amdsmi, amd-smi or rocm-smi"


class TelemetryUnavailable(LatscopeError):
    """No GPU telemetry on this host; the message says which reader failed and why."""


class GpuSource(Protocol):
    """What the sampler reads: its name, the GPUs' static facts, one sample per GPU a read."""

    name: str
    devices: list[DeviceInfo]

    def read(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class NvmlSource:
    def __init__(self, nvml: Any) -> None:
        self.reader = NvmlReader(nvml, pcie_throughput=False)
        self.static = self.reader.open()  # NVML's own keys, what from_nvml reads
        if not self.static:
            self.reader.close()
            raise NvmlUnavailable("no NVIDIA GPU (NVML lists none)")
        self.devices = [DeviceInfo.from_nvml(d) for d in self.static]
        self.name = f"NVML (nvidia-ml-py {_version('nvidia-ml-py')})"
        self._previous: dict[int, NvmlReading] = {}
        self._checked_counters = False

    def read(self) -> list[GpuSample]:
        readings = self.reader.read()
        wall = time.time()
        if not self._checked_counters:
            # the byte counters are free; without them, NVML's 20 ms sampled throughput instead
            self._checked_counters = True
            if readings and "pcie.tx_bytes_total" not in readings[0].values:
                self.reader.pcie_throughput = True
        out = [from_nvml(r, self.static[r.index], wall, self._previous.get(r.index))
               for r in readings]
        self._previous = {r.index: r for r in readings}
        return out

    def close(self) -> None:
        self.reader.close()


class AmdLibSource:
    def __init__(self, lib: Any) -> None:
        self.reader = amd.AmdSmiLibReader(lib)
        count = self.reader.open()
        if not count:
            self.reader.close()
            raise TelemetryUnavailable("no AMD GPU (amdsmi lists no processor)")
        self.name = "amdsmi (ROCm Python library)"
        self.devices = [DeviceInfo(index=i) for i in range(count)]

    def read(self) -> list[GpuSample]:
        return self.reader.read(time.perf_counter_ns(), time.time())

    def close(self) -> None:
        self.reader.close()


class AmdCliSource:
    """``amd-smi metric --json`` (+ ``process --json``), or ``rocm-smi --json``: a subprocess
    per sample (amd-smi takes ~0.3-1 s; run it at a 2 s interval or more)."""

    def __init__(self, tool: str, runner: Callable[..., Any] | None = None) -> None:
        import subprocess

        self.tool, self.runner = tool, runner or subprocess.run
        self.name = f"{tool} --json"
        first = self.read()
        if not first:
            raise TelemetryUnavailable(f"{tool} printed no GPU")
        self.devices = [DeviceInfo(index=s.gpu) for s in first]

    def read(self) -> list[GpuSample]:
        t_ns, wall = time.perf_counter_ns(), time.time()
        if self.tool == "rocm-smi":
            return amd.from_rocm_smi(amd.run_json(amd.ROCM_SMI, self.runner), t_ns, wall)
        samples = amd.from_amd_smi_metric(amd.run_json(amd.AMD_SMI_METRIC, self.runner),
                                          t_ns, wall)
        try:
            procs = amd.from_amd_smi_process(amd.run_json(amd.AMD_SMI_PROCESS, self.runner))
        except (OSError, ValueError):
            procs = {}
        for s in samples:
            s.processes = procs.get(s.gpu, [])
        return samples

    def close(self) -> None:
        pass


def open_source(importer: Callable[[str], Any] = importlib.import_module,
                which: Callable[[str], str | None] = shutil.which) -> GpuSource:
    """The first GPU source that answers, NVIDIA then AMD; else TelemetryUnavailable."""
    notes = []
    try:
        return NvmlSource(importer("pynvml"))
    except ImportError:
        if not which("nvidia-smi"):
            notes.append("no NVIDIA driver")
        else:  # the driver without nvidia-ml-py: its XML, slower but the same readings
            try:
                return NvidiaSmiSource()
            except Exception as exc:  # noqa: BLE001 -- OSError, ParseError, TimeoutExpired
                notes.append(f"nvidia-smi: {type(exc).__name__}: {exc}"[:120])
    except NvmlUnavailable as exc:
        notes.append(_nvml_why(str(exc)))
    try:
        return AmdLibSource(importer("amdsmi"))
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 -- AmdSmiLibraryException (no driver, no device)
        notes.append(f"AMD amdsmi: {type(exc).__name__}: {exc}")
    for tool in ("amd-smi", "rocm-smi"):
        if which(tool):
            try:
                return AmdCliSource(tool)
            except (OSError, ValueError, TelemetryUnavailable) as exc:
                notes.append(f"AMD {tool}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 -- subprocess.TimeoutExpired and kin
                notes.append(f"AMD {tool}: {type(exc).__name__}")
    if not any(n.startswith("AMD") for n in notes):
        notes.append(NO_AMD)
    # one line a user reads at 80 columns, after the findings list's severity column:
    # "No GPU telemetry: no NVIDIA driver, no amdsmi, amd-smi or rocm-smi"
    raise TelemetryUnavailable(", ".join(notes))


def _nvml_why(text: str) -> str:
    for code, why in _NVML_WHY.items():
        if f"NVMLError_{code}" in text:
            return why
    return text


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"
