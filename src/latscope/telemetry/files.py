"""The telemetry a run directory holds, as typed as the sampler writes it: one ``SampleLine`` a
tick in ``telemetry/samples.jsonl`` and the ``TelemetrySummary`` in ``telemetry/telemetry.json``
(docs/telemetry.md, "Run directory"). Encoded here and decoded here, so the keys written are the
keys read; a key left None is absent from the file (the status decides which are there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from latscope.telemetry.nvml import NvmlReading
from latscope.telemetry.sample import GpuProcess, GpuSample

DIR = "telemetry"
SAMPLES = "samples.jsonl"
SUMMARY = "telemetry.json"


class SampleLine(msgspec.Struct):
    """One tick: every GPU read at it (``t_ns`` and ``wall_time``: the first GPU's)."""

    t_ns: int
    wall_time: float
    gpus: list[GpuSample]


def _nvml_key(name: str) -> Any:
    """A field stored under NVML's own key (``pci.bus_id``), as the reader names it."""
    return msgspec.field(default=None, name=name)


class DeviceInfo(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A GPU's static facts, under the NVML reader's keys (AMD and nvidia-smi: the index)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = _nvml_key("pci.bus_id")
    sm_clock_max_mhz: int | None = _nvml_key("clocks.max.sm_mhz")
    mem_clock_max_mhz: int | None = _nvml_key("clocks.max.mem_mhz")
    pcie_max_gen: int | None = _nvml_key("pcie.max_gen")
    pcie_gpu_max_gen: int | None = _nvml_key("pcie.gpu_max_gen")
    pcie_max_width: int | None = _nvml_key("pcie.max_width")
    power_default_limit_mw: int | None = _nvml_key("power.default_limit_mw")
    slowdown_c: int | None = _nvml_key("temperature.slowdown_c")
    ecc_mode: list[int] | None = _nvml_key("ecc.mode")  # [current, pending], 1 = enabled
    xid_events: str | None = _nvml_key("events.xid")  # "registered" | "unavailable"
    mig_mode: list[int] | None = _nvml_key("mig.mode")

    @classmethod
    def from_nvml(cls, raw: NvmlReading) -> DeviceInfo:
        """The static facts of one raw ``NvmlReader.open()`` device (its errors left out); a
        driver answering an odd type leaves only the index (it must not stop the sampling)."""
        try:
            return msgspec.convert({**raw.values, "index": raw.index}, cls, strict=False)
        except msgspec.ValidationError:
            return cls(index=raw.index)


class ServerGpus(msgspec.Struct, kw_only=True):
    """Which GPUs the server's processes hold, how that was found, and who else is on them
    (``others`` None where the server's PIDs are in no GPU's list: another PID namespace).
    Every key is written (an empty list included); the defaults read a hand-made file."""

    server_pids: list[int] = []
    visible_devices: dict[str, str] = {}
    gpus: list[int] = []
    gpus_from: str = ""
    others: dict[int, list[GpuProcess]] | None = None
    server_pids_from: str | UnsetType = UNSET  # absent from a recording's


class ReadCost(msgspec.Struct):
    """The sampler's own reads, ms."""

    mean: float
    max: float


class TelemetrySummary(msgspec.Struct, omit_defaults=True, kw_only=True):
    """``telemetry.json``: ``ok`` with the source, the GPUs and the server's holders, or
    ``unavailable`` with the one-line ``why``."""

    status: str  # ok | unavailable
    why: str | None = None
    source: str | None = None
    interval_s: float | None = None
    samples: int | None = None
    devices: list[DeviceInfo] | None = None
    errors: list[str] | None = None
    read_ms: ReadCost | None = None
    server: ServerGpus | None = None


def write_summary(path: Path, summary: TelemetrySummary) -> None:
    path.write_bytes(msgspec.json.format(msgspec.json.encode(summary), indent=2))


def read_summary(path: Path) -> TelemetrySummary | None:
    """``telemetry.json``; None where it is missing or is not one (a run cut short)."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=TelemetrySummary)
    except (OSError, msgspec.MsgspecError):
        return None


def encode_line(line: SampleLine) -> bytes:
    return msgspec.json.encode(line) + b"\n"
