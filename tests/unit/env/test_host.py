"""Host checks on fake /proc + /sys trees (formats: see conftest.py)."""

from __future__ import annotations

from fakehost import pci_gpu, status

from latscope.env.facts import Facts
from latscope.env.host import gather_sys_facts, pci_gpus
from latscope.findings.hostsetup import (check_cpu_governor, check_cstates, check_gpu_numa_affinity,
                                         check_iommu, check_numa_balancing, check_pcie_links)
from latscope.server.hostview import HostView, format_cpulist, parse_cpulist
from latscope.model import Severity

NODES = {"/sys/devices/system/node/node0/cpulist": "0-15,32-47\n",
         "/sys/devices/system/node/node1/cpulist": "16-31,48-63\n"}


def facts_for(tree, pid=None, vendor="amd"):
    view = HostView(tree)
    facts = Facts(host=view, pid=pid)
    facts.gpu.pci = pci_gpus(view)
    facts.gpu.vendor = vendor
    facts.sys = gather_sys_facts(view, pid, vendor)
    return facts


def one(findings, check_id=None):
    assert len(findings) == 1
    if check_id:
        assert findings[0].id == check_id
    return findings[0]


def test_numa_balancing_on_is_flagged_with_the_value_read(make_tree):
    f = one(check_numa_balancing(facts_for(make_tree({"/proc/sys/kernel/numa_balancing": "1\n"}))))
    assert f.severity == Severity.WARNING
    assert f.evidence[0].value == "1" and f.evidence[0].name == "/proc/sys/kernel/numa_balancing"


def test_numa_balancing_off_passes_and_missing_file_is_skipped(make_tree):
    assert one(check_numa_balancing(facts_for(make_tree(
        {"/proc/sys/kernel/numa_balancing": "0\n"})))).severity == Severity.OK
    f = one(check_numa_balancing(facts_for(make_tree({"/proc/cmdline": "x\n"}))))
    assert f.severity == Severity.SKIPPED and f.title.startswith("skipped:")


def test_iommu_passthrough_required_on_amd_hosts(make_tree):
    tree = make_tree({"/proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 amd_iommu=on quiet\n"})
    f = one(check_iommu(facts_for(tree)))
    assert f.severity == Severity.WARNING and f.evidence[0].value == "amd_iommu=on"
    ok = make_tree({"/proc/cmdline": "BOOT_IMAGE=/vmlinuz intel_iommu=on iommu=pt\n"})
    assert one(check_iommu(facts_for(ok))).severity == Severity.OK


def test_iommu_ignores_arguments_after_double_dash(make_tree):
    # Everything after " -- " goes to init, not the kernel.
    tree = make_tree({"/proc/cmdline": "quiet -- iommu=pt\n"})
    assert one(check_iommu(facts_for(tree))).severity == Severity.WARNING


def test_governor_powersave_counts_cpus(make_tree):
    files = {f"/sys/devices/system/cpu/cpu{i}/cpufreq/scaling_governor":
             ("powersave" if i < 3 else "performance") + "\n" for i in range(4)}
    f = one(check_cpu_governor(facts_for(make_tree(files))))
    assert f.severity == Severity.WARNING
    assert {(e.name, e.value) for e in f.evidence} == {("scaling_governor (3 CPUs)", "powersave"),
                                                       ("scaling_governor (1 CPUs)", "performance")}


def test_governor_absent_in_vm_is_skipped(make_tree):
    f = one(check_cpu_governor(facts_for(make_tree({"/proc/cmdline": "x"}))))
    assert f.severity == Severity.SKIPPED


def test_deep_cstates_enabled_are_listed_with_exit_latency(make_tree):
    base = "/sys/devices/system/cpu/cpu0/cpuidle"
    files = {}
    for n, (name, latency, disabled) in enumerate([("POLL", 0, 0), ("C1", 1, 0), ("C2", 400, 0),
                                                   ("C6", 600, 1)]):
        files |= {f"{base}/state{n}/name": name + "\n", f"{base}/state{n}/latency": f"{latency}\n",
                  f"{base}/state{n}/disable": f"{disabled}\n"}
    f = one(check_cstates(facts_for(make_tree(files))))
    assert f.severity == Severity.WARNING
    assert [(e.name, e.value) for e in f.evidence] == [("state2 C2 exit latency", 400)]  # C6 disabled


def test_pcie_width_downgrade_warns_speed_downgrade_is_info(make_tree):
    files = pci_gpu("0000:0c:00.0", "0x1002", "0x120000", 0, "32.0 GT/s PCIe", "32.0 GT/s PCIe", 8, 16)
    files |= pci_gpu("0000:22:00.0", "0x1002", "0x120000", 0, "2.5 GT/s PCIe", "32.0 GT/s PCIe", 16, 16)
    files |= pci_gpu("0000:38:00.0", "0x1002", "0x120000", 0, "32.0 GT/s PCIe", "32.0 GT/s PCIe", 16, 16)
    # an AMD audio function (class 0x0403) is not a GPU
    files |= {"/sys/bus/pci/devices/0000:0c:00.1/vendor": "0x1002\n",
              "/sys/bus/pci/devices/0000:0c:00.1/class": "0x040300\n"}
    findings = {f.id: f for f in check_pcie_links(facts_for(make_tree(files)))}
    assert set(findings) == {"host.pcie_link.0000:0c:00.0", "host.pcie_link.0000:22:00.0",
                             "host.pcie_link.0000:38:00.0"}
    assert findings["host.pcie_link.0000:0c:00.0"].severity == Severity.WARNING
    assert "x8 of x16" in findings["host.pcie_link.0000:0c:00.0"].title
    assert findings["host.pcie_link.0000:22:00.0"].severity == Severity.INFO
    assert findings["host.pcie_link.0000:38:00.0"].severity == Severity.OK


def test_pcie_unknown_link_is_skipped_not_passed(make_tree):
    files = pci_gpu("0000:00:06.0", "0x10de", "0x030200", -1, "Unknown", "Unknown", 0, 0)
    f = one(check_pcie_links(facts_for(make_tree(files), vendor="nvidia")))
    assert f.severity == Severity.SKIPPED


def _numa_tree(make_tree, cpus: str):
    files = dict(NODES)
    files |= pci_gpu("0000:0c:00.0", "0x1002", "0x120000", 0, "32.0 GT/s", "32.0 GT/s", 16, 16)
    files |= pci_gpu("0000:9f:00.0", "0x1002", "0x120000", 1, "32.0 GT/s", "32.0 GT/s", 16, 16)
    files["/proc/4242/status"] = status(4242, cpus)
    return make_tree(files)


def test_process_pinned_away_from_a_gpu_node_warns(make_tree):
    f = one(check_gpu_numa_affinity(facts_for(_numa_tree(make_tree, "0-15"), pid=4242)))
    assert f.severity == Severity.WARNING and "0000:9f:00.0" in f.title
    assert ("Cpus_allowed_list", "0-15") in [(e.name, e.value) for e in f.evidence]


def test_unpinned_process_on_two_nodes_is_info_and_skipped_without_pid(make_tree):
    tree = _numa_tree(make_tree, "0-63")
    assert one(check_gpu_numa_affinity(facts_for(tree, pid=4242))).severity == Severity.INFO
    assert one(check_gpu_numa_affinity(facts_for(tree))).severity == Severity.SKIPPED


def test_cpulist_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
