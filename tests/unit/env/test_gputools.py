"""GPU tool parsers, on the real nvidia-smi captures and on documented-format AMD/NVIDIA outputs."""

from __future__ import annotations

import tarfile

from latscope.env import gputools

from tooltexts import amd_smi_static, nvidia_topo, rocm_smi_showtopo, rocminfo


def test_nvidia_smi_table_from_real_h200(fixtures_dir):
    text = (fixtures_dir / "vllm/h200-vllm0.26/nvidia_smi.txt").read_text()
    gpus, procs, versions = gputools.parse_nvidia_smi(text)
    assert [(g.index, g.name, g.bus_id) for g in gpus] == [(0, "NVIDIA H200", "00000000:00:06.0")]
    assert (gpus[0].memory_used_mib, gpus[0].memory_total_mib) == (0.0, 143771.0)
    assert procs == []  # "No running processes found"
    assert versions == {"driver": "580.159.04", "cuda": "13.0"}


def test_nvidia_topo_from_real_h200(fixtures_dir):
    topo = gputools.parse_nvidia_topo((fixtures_dir / "vllm/h200-vllm0.26/nvidia_smi.txt").read_text())
    assert topo.gpus == ["GPU0"] and topo.links == {}
    assert topo.cpu_affinity == {"GPU0": "0-15"} and topo.numa == {"GPU0": "0"}


def test_nvidia_processes_from_real_capture(h200_capture):
    with tarfile.open(h200_capture) as tar:
        table = tar.extractfile("latscope/tools/nvidia-smi.txt").read().decode()
        csv = tar.extractfile("latscope/tools/nvidia-smi_apps.txt").read().decode()
    _, procs, _ = gputools.parse_nvidia_smi(table)
    assert {(p.pid, p.used_mib) for p in procs} == {(423, 1634.0), (424, 866.0)}
    assert {(p.pid, p.name, p.used_mib) for p in gputools.parse_nvidia_apps(csv)} == {
        (423, "python3", 1634.0), (424, "python3", 866.0)}


def test_nvidia_topo_eight_gpus_nvlink():
    topo = gputools.parse_nvidia_topo(nvidia_topo("NV18"))
    assert topo.gpus == [f"GPU{i}" for i in range(8)]
    assert len(topo.links) == 56 and set(topo.links.values()) == {"NV18"}  # NIC column excluded
    assert topo.numa["GPU5"] == "1" and topo.cpu_affinity["GPU0"] == "0-55,112-167"


def test_nvidia_topo_pcie_only():
    topo = gputools.parse_nvidia_topo(nvidia_topo("PCIE"))
    assert topo.links[("GPU0", "GPU1")] == "NODE" and topo.links[("GPU0", "GPU4")] == "SYS"


def test_rocm_smi_showtopo_mi300x():
    topo = gputools.parse_rocm_smi_topo(rocm_smi_showtopo("XGMI"))
    assert topo.gpus == [f"GPU{i}" for i in range(8)]
    assert set(topo.links.values()) == {"XGMI"} and len(topo.links) == 56
    assert set(topo.hops.values()) == {1}
    assert topo.numa == {f"GPU{i}": str(i // 4) for i in range(8)}


def test_rocm_smi_showtopo_issue_108_layout():
    # The exact 4-GPU PCIe output quoted in ROCm/rocm_smi_lib issue #108.
    text = """======================= ROCm System Management Interface =======================
=========================== Weight between two GPUs ============================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            52           52           52
GPU1   52           0            52           52
GPU2   52           52           0            52
GPU3   52           52           52           0

============================ Hops between two GPUs =============================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            3            3            3
GPU1   3            0            3            3
GPU2   3            3            0            3
GPU3   3            3            3            0

========================== Link Type between two GPUs ==========================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            PCIE         PCIE         PCIE
GPU1   PCIE         0            PCIE         PCIE
GPU2   PCIE         PCIE         0            PCIE
GPU3   PCIE         PCIE         PCIE         0

================================== Numa Nodes ==================================
GPU[0]      : (Topology) Numa Node: 0
GPU[0]      : (Topology) Numa Affinity: 0
GPU[1]      : (Topology) Numa Node: 1
GPU[1]      : (Topology) Numa Affinity: 1
GPU[2]      : (Topology) Numa Node: 3
GPU[2]      : (Topology) Numa Affinity: 3
GPU[3]      : (Topology) Numa Node: 2
GPU[3]      : (Topology) Numa Affinity: 2
============================= End of ROCm SMI Log ==============================
"""
    topo = gputools.parse_rocm_smi_topo(text)
    assert topo.links[("GPU2", "GPU3")] == "PCIE" and topo.hops[("GPU0", "GPU3")] == 3
    assert topo.numa == {"GPU0": "0", "GPU1": "1", "GPU2": "3", "GPU3": "2"}


def test_amd_smi_static_mi300x():
    gpus = gputools.parse_amd_smi_static(amd_smi_static())
    assert len(gpus) == 8
    assert {(g.name, g.gfx) for g in gpus} == {("AMD Instinct MI300X", "gfx942")}
    assert gpus[4].bus_id == "0000:9f:00.0"


def test_amd_smi_static_docs_example_mi300a():
    # Block copied from the amdsmi CLI docs ("Example output from amd-smi static"), trimmed.
    text = """CPU: 0
    SMU:
        FW_VERSION: 85.90.0

GPU: 0
    ASIC:
        MARKET_NAME: AMD Instinct MI300A
        VENDOR_ID: 0x1002
        TARGET_GRAPHICS_VERSION: gfx942
    BUS:
        BDF: 0000:01:00.0
        MAX_PCIE_SPEED: 32 GT/s
"""
    gpus = gputools.parse_amd_smi_static(text)
    assert [(g.index, g.name, g.gfx, g.bus_id) for g in gpus] == [
        (0, "AMD Instinct MI300A", "gfx942", "0000:01:00.0")]


def test_rocminfo_keeps_gpu_agents_and_their_gfx():
    gpus = gputools.parse_rocminfo(rocminfo())
    assert len(gpus) == 8  # the two CPU agents are not GPUs
    assert {(g.gfx, g.name) for g in gpus} == {("gfx942", "AMD Instinct MI300X")}


def test_rocm_smi_product_name():
    text = ("GPU[0]\t\t: Card Series: AMD Instinct MI300X VF\nGPU[0]\t\t: GFX Version: gfx942\n"
            "GPU[1]\t\t: Card Series: AMD Instinct MI300X VF\nGPU[1]\t\t: GFX Version: gfx942\n")
    gpus = gputools.parse_rocm_smi_product(text)
    assert [(g.index, g.name, g.gfx) for g in gpus] == [(0, "AMD Instinct MI300X VF", "gfx942"),
                                                          (1, "AMD Instinct MI300X VF", "gfx942")]
