"""Host facts: the GPUs on the PCI bus (vendor, link state, NUMA node), each NUMA node's CPUs
and a process's CPU affinity, read from ``/sys`` and ``/proc`` through a ``HostView``; files are as
documented in the kernel's ABI docs (``Documentation/ABI/testing/sysfs-bus-pci`` for
``{current,max}_link_{speed,width}`` and ``numa_node``). The checks that judge them are in
``latscope.findings.hostsetup``.
"""

from __future__ import annotations

import re

from latscope.env.facts import PciGpu
from latscope.server.hostview import HostView, parse_cpulist

GPU_VENDORS = {"0x10de": "nvidia", "0x1002": "amd"}
# Display/3D controllers and "processing accelerators" (MI300X enumerates as class 0x1200).
GPU_CLASS_PREFIXES = ("0x0300", "0x0302", "0x0380", "0x1200")


def pci_gpus(view: HostView) -> list[PciGpu]:
    """NVIDIA and AMD GPUs under ``/sys/bus/pci/devices``, with link state and NUMA node."""
    gpus = []
    for bdf in view.listdir("/sys/bus/pci/devices"):
        base = f"/sys/bus/pci/devices/{bdf}"
        vendor = GPU_VENDORS.get((view.read_value(f"{base}/vendor") or "").lower())
        cls = (view.read_value(f"{base}/class") or "").lower()
        if vendor is None or not cls.startswith(GPU_CLASS_PREFIXES):
            continue
        node = view.read_value(f"{base}/numa_node")
        gpus.append(PciGpu(
            bdf=bdf, vendor=vendor,
            numa_node=int(node) if node and re.fullmatch(r"-?\d+", node) else None,
            current_link_speed=view.read_value(f"{base}/current_link_speed") or "",
            max_link_speed=view.read_value(f"{base}/max_link_speed") or "",
            current_link_width=view.read_value(f"{base}/current_link_width") or "",
            max_link_width=view.read_value(f"{base}/max_link_width") or "",
        ))
    return gpus



def node_cpus(view: HostView) -> dict[int, set[int]]:
    nodes = {}
    for name in view.listdir("/sys/devices/system/node"):
        m = re.fullmatch(r"node(\d+)", name)
        text = view.read_value(f"/sys/devices/system/node/{name}/cpulist") if m else None
        if m and text:
            nodes[int(m.group(1))] = parse_cpulist(text)
    return nodes


def process_affinity(view: HostView, pid: int) -> set[int] | None:
    status = view.read(f"/proc/{pid}/status") or ""
    m = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M)
    return parse_cpulist(m.group(1)) if m else None

