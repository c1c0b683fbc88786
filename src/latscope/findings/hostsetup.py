"""Host checks (each id is documented in docs/findings.md): NUMA balancing, IOMMU mode, CPU
governor and idle states, each GPU's PCIe link (current vs max) and NUMA node vs the server's CPU
affinity.

The values were read from ``/proc`` and ``/sys`` by ``latscope.env.host`` (``facts.sys``,
``facts.gpu.pci``), each with its source; the files are named there.
"""

from __future__ import annotations

import re

from latscope.env.facts import Facts
from latscope.env.host import KERNEL_CMDLINE, NUMA_BALANCING
from latscope.findings import reference as _ref
from latscope.findings.checkbase import ev, skipped
from latscope.model import Finding, Severity
from latscope.server.hostview import format_cpulist

REF = "docs/findings.md"
AMD_MI300X_DOC = "https://rocm.docs.amd.com/en/latest/how-to/system-optimization/mi300x.html"
PCI_ABI_DOC = "https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-bus-pci"
CPUFREQ_DOC = "https://docs.kernel.org/admin-guide/pm/cpufreq.html"
NUMACTL_DOC = "https://man7.org/linux/man-pages/man8/numactl.8.html"


def check_numa_balancing(facts: Facts) -> list[Finding]:
    path, value = NUMA_BALANCING, facts.sys.numa_balancing
    if value is None:
        return [skipped("host.numa_balancing", f"{path} not readable (kernel without NUMA)", "host")]
    evidence = [ev(path, value, facts.sys.numa_balancing_source)]
    if value == "0":
        return [Finding("host.numa_balancing", Severity.OK, "automatic NUMA balancing is off",
                        evidence, layer="host")]
    severity = Severity.WARNING if facts.gpu.vendor else Severity.INFO
    return [Finding(
        "host.numa_balancing", severity, "automatic NUMA balancing is on", evidence,
        why="The kernel periodically unmaps pages to migrate them between NUMA nodes; AMD reports GPU "
            "hangs and run-to-run variance with it on.",
        fix="sysctl kernel.numa_balancing=0 (persist in /etc/sysctl.d/)",
        reference=_ref("host.numa_balancing", AMD_MI300X_DOC), layer="host")]


def check_iommu(facts: Facts) -> list[Finding]:
    path, cmdline = KERNEL_CMDLINE, facts.sys.kernel_cmdline
    if cmdline is None:
        return [skipped("host.iommu", f"{path} not readable", "host")]
    kernel_args = cmdline.split(" -- ")[0].split()  # after "--" the args belong to init
    iommu = [a for a in kernel_args if "iommu" in a]
    evidence = [ev("iommu arguments", " ".join(iommu) or "(none)", facts.sys.kernel_cmdline_source)]
    if "iommu=pt" in kernel_args:
        return [Finding("host.iommu", Severity.OK, "IOMMU in passthrough mode (iommu=pt)", evidence,
                        layer="host")]
    severity = Severity.WARNING if facts.gpu.vendor == "amd" else Severity.INFO
    return [Finding(
        "host.iommu", severity, "kernel command line lacks iommu=pt", evidence,
        why="With the IOMMU translating, every GPU DMA goes through address translation; AMD's "
            "MI300X guide requires passthrough mode.",
        fix="add iommu=pt (Intel hosts: intel_iommu=on iommu=pt) to the kernel command line, reboot, "
            "check with dmesg | grep iommu",
        reference=_ref("host.iommu", AMD_MI300X_DOC), layer="host")]


def check_cpu_governor(facts: Facts) -> list[Finding]:
    facts.sys.need("cpu_governor")
    if not facts.sys.governors:
        return [skipped("host.cpu_governor", "no cpufreq in sysfs (VM, or no frequency driver)",
                        "host")]
    by_governor: dict[str, list[str]] = {}
    for path, governor in facts.sys.governors.items():
        by_governor.setdefault(governor, []).append(path)
    source = facts.sys.governors_source
    evidence = [ev(f"scaling_governor ({len(cpus)} CPUs)", gov, source)
                for gov, cpus in sorted(by_governor.items())]
    others = sorted(set(by_governor) - {"performance"})
    if not others:
        return [Finding("host.cpu_governor", Severity.OK, "CPU governor is performance on all CPUs",
                        evidence, layer="host")]
    severity = Severity.WARNING if "powersave" in others else Severity.INFO
    return [Finding(
        "host.cpu_governor", severity, f"CPU frequency governor is {', '.join(others)}", evidence,
        why="The CPU side of serving (scheduling, sampling, detokenizing, kernel launches) runs "
            "between GPU steps; a clock that ramps up late stretches every step.",
        fix="cpupower frequency-set -g performance; measure TPOT before and after",
        reference=_ref("host.cpu_governor", CPUFREQ_DOC),
        layer="host")]


def check_cstates(facts: Facts) -> list[Finding]:
    facts.sys.need("cstates")
    states = [c.state for c in facts.sys.cstates]
    if not states:
        return [skipped("host.cstates", "no cpuidle states in sysfs (VM, or idle driver absent)",
                        "host")]
    deep = []
    for c in facts.sys.cstates:
        level = re.match(r"C(\d+)", c.name)
        if level and int(level.group(1)) >= 2 and not c.disabled:
            deep.append(ev(f"{c.state} {c.name} exit latency", int(c.latency) if c.latency.isdigit()
                           else c.latency, c.latency_source, "us"))
    if not deep:
        return [Finding("host.cstates", Severity.OK, "no C2 or deeper idle state enabled on cpu0",
                        [ev("states", ",".join(states), facts.sys.cstates_source)], layer="host")]
    return [Finding(
        "host.cstates", Severity.WARNING, "deep CPU idle states (C2+) are enabled", deep,
        why="A core waking from a deep C-state adds its exit latency to the next GPU launch or "
            "request it handles.",
        fix="cpupower idle-set -d 2 (disables C2 and deeper); measure ITL before and after",
        reference=_ref("host.cstates", AMD_MI300X_DOC), layer="host")]


def _gts(speed: str) -> float | None:
    m = re.match(r"([\d.]+)\s*GT/s", speed)
    return float(m.group(1)) if m else None


def check_pcie_links(facts: Facts) -> list[Finding]:
    if not facts.gpu.pci:
        return [skipped("host.pcie_link", "no NVIDIA/AMD GPU in /sys/bus/pci/devices", "host")]
    findings = []
    for gpu in facts.gpu.pci:
        base = facts.host.source(f"/sys/bus/pci/devices/{gpu.bdf}")
        evidence = [ev("current_link_speed", gpu.current_link_speed, base),
                    ev("max_link_speed", gpu.max_link_speed, base),
                    ev("current_link_width", gpu.current_link_width, base),
                    ev("max_link_width", gpu.max_link_width, base)]
        cur, top = _gts(gpu.current_link_speed), _gts(gpu.max_link_speed)
        w_cur, w_top = gpu.current_link_width, gpu.max_link_width
        check_id = f"host.pcie_link.{gpu.bdf}"
        if cur is None or top is None or not w_cur.isdigit() or not w_top.isdigit():
            findings.append(skipped(check_id, f"{gpu.bdf}: link speed/width not reported "
                                    "(virtual function or passthrough)", "host"))
        elif int(w_cur) < int(w_top):
            findings.append(Finding(
                check_id, Severity.WARNING,
                f"GPU {gpu.bdf} PCIe link runs x{w_cur} of x{w_top}", evidence,
                why="A narrower link divides host-device bandwidth (weights loading, KV offload, "
                    "sampling copies); width does not drop for power saving.",
                fix="reseat the card or riser, check BIOS lane bifurcation",
                reference=_ref("host.pcie_link", PCI_ABI_DOC), layer="host"))
        elif cur < top:
            findings.append(Finding(
                check_id, Severity.INFO,
                f"GPU {gpu.bdf} PCIe link at {cur:g} of {top:g} GT/s (re-check under load)", evidence,
                why="GPUs lower the link speed when idle to save power, so this is only a problem "
                    "if it persists while the server is busy.",
                fix="read again under load (latscope doctor during a bench run); if still low, "
                    "check BIOS PCIe generation and reseat",
                reference=_ref("host.pcie_link", PCI_ABI_DOC), layer="host"))
        else:
            findings.append(Finding(check_id, Severity.OK, f"GPU {gpu.bdf} PCIe link at full speed "
                                    "and width", evidence, layer="host"))
    return findings


def check_gpu_numa_affinity(facts: Facts) -> list[Finding]:
    check_id = "host.gpu_numa_affinity"
    gpu_nodes = {g.bdf: g.numa_node for g in facts.gpu.pci if g.numa_node is not None
                 and g.numa_node >= 0}
    if not facts.gpu.pci:
        return [skipped(check_id, "no GPU in /sys/bus/pci/devices", "host")]
    if not gpu_nodes:
        return [skipped(check_id, "sysfs gives the GPUs no NUMA node (single node or VM)", "host")]
    if facts.pid is None:
        return [skipped(check_id, "no server pid (pass --pid, or a --url served from this host)",
                        "host")]
    facts.sys.need("gpu_numa_affinity")
    allowed, nodes = facts.sys.server_affinity, facts.sys.node_cpus
    if allowed is None or not nodes:
        return [skipped(check_id, f"/proc/{facts.pid}/status or node cpulists not readable", "host")]
    status_src = facts.sys.server_affinity_source
    evidence = [ev("Cpus_allowed_list", format_cpulist(allowed), status_src)]
    evidence += [ev(f"{bdf} numa_node", node, facts.host.source(f"/sys/bus/pci/devices/{bdf}/numa_node"))
                 for bdf, node in gpu_nodes.items()]
    if len(nodes) < 2:
        return [Finding(check_id, Severity.OK, "single NUMA node: no cross-socket placement possible",
                        evidence, layer="host")]
    process_nodes = {n for n, cpus in nodes.items() if cpus & allowed}
    far = {bdf: n for bdf, n in gpu_nodes.items() if n not in process_nodes}
    if far:
        return [Finding(
            check_id, Severity.WARNING,
            f"server process may not run on the NUMA node of GPU(s) {', '.join(far)}", evidence,
            why="Host-side buffers and launches then cross the socket interconnect.",
            fix="pin each rank with numactl --cpunodebind/--membind to its GPU's node",
            reference=_ref(check_id, NUMACTL_DOC), layer="host")]
    if len(process_nodes) > 1:
        return [Finding(
            check_id, Severity.INFO, "server process is not pinned to its GPUs' NUMA node(s)", evidence,
            why="The scheduler may run its threads on any socket.",
            fix="numactl --cpunodebind=<gpu node> (measure the difference)",
            reference=_ref(check_id, NUMACTL_DOC), layer="host")]
    return [Finding(check_id, Severity.OK, "server process runs on its GPUs' NUMA node", evidence,
                    layer="host")]


HOST_CHECKS = (check_numa_balancing, check_iommu, check_cpu_governor, check_cstates,
               check_pcie_links, check_gpu_numa_affinity)
