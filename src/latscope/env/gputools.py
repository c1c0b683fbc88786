"""Parsers for GPU tool outputs: ``nvidia-smi``, ``nvidia-smi topo -m``, ``rocm-smi``, ``rocminfo``,
``amd-smi static``. Pure text-in, data-out functions, so that live and captured outputs parse alike.

Formats followed: the nvidia-smi default table and ``topo -m`` legend as printed by driver 580
(fixture ``vllm/h200-vllm0.26/nvidia_smi.txt``); ``rocm-smi --showtopo`` sections as shown in
ROCm/rocm_smi_lib issue #108; ``amd-smi static`` as in ROCm/amdsmi ``docs/how-to/amdsmi-cli-tool.md``
("Example output from amd-smi static"); ``rocminfo`` agent blocks (``Name:``, ``Marketing Name:``,
``Device Type:``) as printed by ROCm/rocminfo.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(slots=True)
class GpuInfo:
    index: int
    name: str = ""
    gfx: str = ""  # AMD LLVM target (gfx942), empty on NVIDIA
    bus_id: str = ""  # PCI address as the tool printed it
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None


@dataclass(slots=True)
class GpuProcess:
    gpu: int | None
    pid: int
    name: str
    used_mib: float | None = None


@dataclass(slots=True)
class Topology:
    """GPU-to-GPU links as a tool printed them (``NV18``, ``SYS``, ``XGMI``, ``PCIE``...)."""

    gpus: list[str] = field(default_factory=list)
    links: dict[tuple[str, str], str] = field(default_factory=dict)
    hops: dict[tuple[str, str], int] = field(default_factory=dict)
    numa: dict[str, str] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


# ---- NVIDIA --------------------------------------------------------------------------------

_NV_GPU_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+([0-9A-Fa-f:.]+)\s+(\S+)\s+\|")
_NV_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_NV_PROC = re.compile(r"^\|\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(.+?)\s+(\d+)MiB\s+\|")
_NV_VERSION = re.compile(r"Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)")


def parse_nvidia_smi(text: str) -> tuple[list[GpuInfo], list[GpuProcess], dict[str, str]]:
    """The default ``nvidia-smi`` table: GPUs (index, name, bus id, memory), processes, versions."""
    gpus: list[GpuInfo] = []
    procs: list[GpuProcess] = []
    lines = strip_ansi(text).splitlines()
    for i, line in enumerate(lines):
        m = _NV_GPU_ROW.match(line)
        if m:
            gpu = GpuInfo(index=int(m.group(1)), name=m.group(2).strip(), bus_id=m.group(4))
            mem = _NV_MEM.search(lines[i + 1]) if i + 1 < len(lines) else None
            if mem:
                gpu.memory_used_mib, gpu.memory_total_mib = float(mem.group(1)), float(mem.group(2))
            gpus.append(gpu)
            continue
        p = _NV_PROC.match(line)
        if p:
            procs.append(GpuProcess(gpu=int(p.group(1)), pid=int(p.group(4)), name=p.group(6).strip(),
                                    used_mib=float(p.group(7))))
    versions = {}
    v = _NV_VERSION.search(text)
    if v:
        versions = {"driver": v.group(1), "cuda": v.group(2)}
    return gpus, procs, versions


def parse_nvidia_apps(text: str) -> list[GpuProcess]:
    """``nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader``."""
    procs = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            mem = re.match(r"(\d+)", parts[2])
            procs.append(GpuProcess(gpu=None, pid=int(parts[0]), name=parts[1],
                                    used_mib=float(mem.group(1)) if mem else None))
    return procs


def parse_nvidia_topo(text: str) -> Topology:
    """``nvidia-smi topo -m``: the matrix up to the ``Legend:`` line (cells separated by tabs)."""
    topo = Topology()
    lines = [strip_ansi(line) for line in text.splitlines()]
    header: list[str] = []
    for line in lines:
        if line.strip().startswith("Legend"):
            break
        cells = [c.strip() for c in line.split("\t") if c.strip()]
        if not cells:
            continue
        if not header and cells[0].startswith("GPU") and "CPU Affinity" in cells:
            header = cells
            continue
        if header and re.fullmatch(r"GPU\d+", cells[0]):
            devices = [h for h in header if re.fullmatch(r"(GPU|NIC)\d+", h)]
            row, values = cells[0], cells[1:]
            topo.gpus.append(row)
            for dev, val in zip(devices, values):
                if dev.startswith("GPU") and dev != row:
                    topo.links[(row, dev)] = val
            rest = values[len(devices):]
            if rest:
                topo.cpu_affinity[row] = rest[0]
            if len(rest) > 1:
                topo.numa[row] = rest[1]
    return topo


# ---- AMD -----------------------------------------------------------------------------------

_ROCM_SECTION = re.compile(r"^=+\s*(.*?)\s*=+$")
_ROCM_NUMA = re.compile(r"GPU\[(\d+)\]\s*:\s*\(Topology\) Numa Node:\s*(-?\d+)")
_ROCM_KV = re.compile(r"GPU\[(\d+)\]\s*:\s*([^:]+):\s*(.*)$")


def _rocm_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = ""
    for line in strip_ansi(text).splitlines():
        m = _ROCM_SECTION.match(line.strip())
        if m and line.strip().startswith("="):
            current = m.group(1)
            sections.setdefault(current, [])
        elif line.strip():
            sections.setdefault(current, []).append(line)
    return sections


def _matrix(lines: list[str]) -> dict[tuple[str, str], str]:
    if not lines:
        return {}
    cols = lines[0].split()
    out: dict[tuple[str, str], str] = {}
    for line in lines[1:]:
        cells = line.split()
        if not cells or not cells[0].startswith("GPU"):
            continue
        for col, val in zip(cols, cells[1:]):
            if col != cells[0]:
                out[(cells[0], col)] = val
    return out


def parse_rocm_smi_topo(text: str) -> Topology:
    """``rocm-smi --showtopo``: weight, hops and link-type matrices plus each GPU's NUMA node."""
    sections = _rocm_sections(text)
    topo = Topology()
    topo.links = _matrix(sections.get("Link Type between two GPUs", []))
    topo.hops = {k: int(v) for k, v in _matrix(sections.get("Hops between two GPUs", [])).items()
                 if v.isdigit()}
    for line in sections.get("Numa Nodes", []):
        m = _ROCM_NUMA.search(line)
        if m:
            topo.numa[f"GPU{m.group(1)}"] = m.group(2)
    names = {a for pair in topo.links for a in pair} | set(topo.numa)
    topo.gpus = sorted(names, key=lambda g: int(g[3:]))
    return topo


def parse_rocm_smi_product(text: str) -> list[GpuInfo]:
    """``rocm-smi --showproductname``: ``GPU[i] : Card Series: ...`` and ``GFX Version: gfxNNN``."""
    gpus: dict[int, GpuInfo] = {}
    for line in strip_ansi(text).splitlines():
        m = _ROCM_KV.search(line)
        if not m:
            continue
        gpu = gpus.setdefault(int(m.group(1)), GpuInfo(index=int(m.group(1))))
        key, value = m.group(2).strip(), m.group(3).strip()
        if key == "Card Series":
            gpu.name = value
        elif key == "GFX Version":
            gpu.gfx = value
    return [gpus[i] for i in sorted(gpus)]


def parse_amd_smi_static(text: str) -> list[GpuInfo]:
    """``amd-smi static``: ``GPU: N`` blocks with ``MARKET_NAME``, ``TARGET_GRAPHICS_VERSION``, ``BDF``."""
    gpus: list[GpuInfo] = []
    for line in strip_ansi(text).splitlines():
        m = re.match(r"^GPU:\s*(\d+)\s*$", line)
        if m:
            gpus.append(GpuInfo(index=int(m.group(1))))
            continue
        if not gpus or ":" not in line:
            continue
        key, _, value = line.strip().partition(":")
        key, value = key.strip().upper().replace(" ", "_"), value.strip()
        if key == "MARKET_NAME":
            gpus[-1].name = value
        elif key == "TARGET_GRAPHICS_VERSION":
            gpus[-1].gfx = value
        elif key == "BDF":
            gpus[-1].bus_id = value
    return gpus


def parse_rocminfo(text: str) -> list[GpuInfo]:
    """``rocminfo``: one ``GpuInfo`` per agent whose ``Device Type`` is GPU (name = gfx target)."""
    agents: list[dict[str, str]] = []
    for line in strip_ansi(text).splitlines():
        if re.match(r"^\*+\s*$", line.strip()) or re.match(r"^Agent \d+", line.strip()):
            if re.match(r"^Agent \d+", line.strip()):
                agents.append({})
            continue
        if agents and ":" in line:
            key, _, value = line.strip().partition(":")
            agents[-1].setdefault(key.strip(), value.strip())
    gpus: list[GpuInfo] = []
    for agent in agents:
        if agent.get("Device Type") == "GPU":
            gpus.append(GpuInfo(index=len(gpus), name=agent.get("Marketing Name", ""),
                                gfx=agent.get("Name", "")))
    return gpus
