"""Host facts: the GPUs on the PCI bus (vendor, link state, NUMA node), NUMA balancing, the
kernel command line, CPU governors and idle states, each NUMA node's CPUs and the server's CPU
affinity, read from ``/sys`` and ``/proc`` through a ``HostView``; files are as documented in
proc(5) and the kernel's ABI docs (``Documentation/ABI/testing/sysfs-bus-pci`` for
``{current,max}_link_{speed,width}`` and ``numa_node``; ``sysfs-devices-system-cpu`` for
``cpufreq/scaling_governor`` and ``cpuidle/stateN/{name,latency,disable}``). The checks that judge
them are in ``latscope.findings.hostsetup``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from latscope.env.facts import CState, PciGpu, SysFacts
from latscope.errors import HostCheckError
from latscope.server.hostview import HostView, parse_cpulist, process_tree

NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
KERNEL_CMDLINE = "/proc/cmdline"
GOVERNORS = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"
GOVERNORS_SOURCE = "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"
CPUIDLE = "/sys/devices/system/cpu/cpu0/cpuidle"

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


def gather_sys_facts(view: HostView, pid: int | None, vendor: str) -> SysFacts:
    """Everything the host checks judge, read once; ``pid`` is the server's (None: unknown),
    ``vendor`` the GPUs' (the process tree is read for nvidia-smi's process list only)."""
    facts = SysFacts(numa_balancing=view.read_value(NUMA_BALANCING),
                     numa_balancing_source=view.source(NUMA_BALANCING),
                     kernel_cmdline=view.read_value(KERNEL_CMDLINE),
                     kernel_cmdline_source=view.source(KERNEL_CMDLINE),
                     governors_source=view.source(GOVERNORS_SOURCE),
                     cstates_source=view.source(CPUIDLE))
    governors = _guarded(facts, "cpu_governor", lambda: view.glob(GOVERNORS))
    facts.governors = {path: view.read_value(path) or "?" for path in governors or []}
    facts.cstates = _guarded(facts, "cstates", lambda: _cstates(view)) or []
    if pid is not None:
        facts.server_affinity = _guarded(facts, "gpu_numa_affinity",
                                         lambda: process_affinity(view, pid))
        facts.server_affinity_source = view.source(f"/proc/{pid}/status")
        if "gpu_numa_affinity" not in facts.errors:
            facts.node_cpus = _guarded(facts, "gpu_numa_affinity", lambda: node_cpus(view)) or {}
        if vendor == "nvidia":
            facts.server_processes = _guarded(facts, "gpu_tenants",
                                              lambda: process_tree(view, pid)) or set()
    return facts


def _cstates(view: HostView) -> list[CState]:
    out = []
    for state in (s for s in view.listdir(CPUIDLE) if s.startswith("state")):
        out.append(CState(state, view.read_value(f"{CPUIDLE}/{state}/name") or state,
                          view.read_value(f"{CPUIDLE}/{state}/latency") or "0",
                          view.read_value(f"{CPUIDLE}/{state}/disable") == "1",
                          view.source(f"{CPUIDLE}/{state}/latency")))
    return out


def _guarded(facts: SysFacts, check: str, read: Callable[[], Any]) -> Any:
    """``read()``, or None with its error kept for ``check`` (which then reports it)."""
    try:
        return read()
    except (OSError, ValueError, HostCheckError) as exc:
        facts.errors[check] = exc
        return None
