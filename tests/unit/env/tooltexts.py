"""Recorded-format tool outputs for an 8-GPU AMD MI300X host and an 8-GPU NVIDIA host.

Layouts copied from the documented outputs: ``rocm-smi --showtopo`` as shown in ROCm/rocm_smi_lib
issue #108 (sections "Weight/Hops/Link Type between two GPUs", "Numa Nodes"); ``amd-smi static``
as in ROCm/amdsmi docs/how-to/amdsmi-cli-tool.md ("Example output from amd-smi static");
``rocminfo`` agent blocks (``*******`` / ``Agent N`` / ``Name:`` / ``Marketing Name:`` /
``Device Type:``) as printed by ROCm/rocminfo; ``nvidia-smi topo -m`` as printed by driver 580
(see shared fixture vllm/h200-vllm0.26/nvidia_smi.txt: tab-separated cells, ANSI-underlined header).
The values (8 GPUs, two NUMA nodes, all-XGMI / all-NV18) are those of the public MI300X and
DGX H100 platform descriptions.
"""

from __future__ import annotations


def _grid(title: str, cell) -> str:
    head = "       " + "".join(f"GPU{j:<10d}" for j in range(8))
    rows = [f"GPU{i}   " + "".join(f"{cell(i, j):<13}" for j in range(8)) for i in range(8)]
    return "\n".join([f"{'=' * 20} {title} {'=' * 20}", head, *rows, ""])


def rocm_smi_showtopo(link: str = "XGMI") -> str:
    weight = 15 if link == "XGMI" else 40
    hops = 1 if link == "XGMI" else 2
    numa = "".join(f"GPU[{i}]\t\t: (Topology) Numa Node: {i // 4}\n"
                   f"GPU[{i}]\t\t: (Topology) Numa Affinity: {i // 4}\n" for i in range(8))
    return "\n".join([
        "=" * 28 + " ROCm System Management Interface " + "=" * 28,
        _grid("Weight between two GPUs", lambda i, j: 0 if i == j else weight),
        _grid("Hops between two GPUs", lambda i, j: 0 if i == j else hops),
        _grid("Link Type between two GPUs", lambda i, j: 0 if i == j else link),
        "=" * 38 + " Numa Nodes " + "=" * 38, numa,
        "=" * 30 + " End of ROCm SMI Log " + "=" * 30, ""])


MI300X_BDFS = ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0",
               "0000:9f:00.0", "0000:af:00.0", "0000:bf:00.0", "0000:df:00.0"]


def amd_smi_static() -> str:
    blocks = []
    for i, bdf in enumerate(MI300X_BDFS):
        blocks.append(f"""GPU: {i}
    ASIC:
        MARKET_NAME: AMD Instinct MI300X
        VENDOR_ID: 0x1002
        VENDOR_NAME: Advanced Micro Devices Inc. [AMD/ATI]
        SUBVENDOR_ID: 0x1002
        DEVICE_ID: 0x74a1
        SUBSYSTEM_ID: 0x74a1
        REV_ID: 0x00
        ASIC_SERIAL: 0x0000000000000000
        OAM_ID: {i}
        NUM_COMPUTE_UNITS: 304
        TARGET_GRAPHICS_VERSION: gfx942
    BUS:
        BDF: {bdf}
        MAX_PCIE_WIDTH: 16
        MAX_PCIE_SPEED: 32 GT/s
        PCIE_INTERFACE_VERSION: Gen 5
        SLOT_TYPE: OAM
""")
    return "\n".join(blocks)


def rocminfo() -> str:
    def agent(n: int, name: str, marketing: str, kind: str) -> str:
        isa = (f"  ISA Info:\n    ISA 1\n      Name:                    amdgcn-amd-amdhsa--{name}:"
               "sramecc+:xnack-\n") if kind == "GPU" else ""
        return (f"*******\nAgent {n}\n*******\n  Name:                    {name}\n"
                f"  Uuid:                    {kind}-XX\n  Marketing Name:          {marketing}\n"
                f"  Vendor Name:             AMD\n  Device Type:             {kind}\n{isa}")
    agents = [agent(1, "AMD EPYC 9654 96-Core Processor", "AMD EPYC 9654 96-Core Processor", "CPU"),
              agent(2, "AMD EPYC 9654 96-Core Processor", "AMD EPYC 9654 96-Core Processor", "CPU")]
    agents += [agent(3 + i, "gfx942", "AMD Instinct MI300X", "GPU") for i in range(8)]
    return ("ROCk module version 6.10.5 is loaded\n=====================\nHSA System Attributes\n"
            "=====================\nRuntime Version:         1.14\n\n==========\nHSA Agents\n"
            "==========\n" + "".join(agents) + "*** Done ***\n")


def nvidia_topo(link: str = "NV18") -> str:
    """8 GPUs and one NIC; GPUs 0-3 on NUMA node 0, 4-7 on node 1."""
    header = "\x1b[4m\t" + "\t".join(f"GPU{j}" for j in range(8)) + \
        "\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    rows = []
    for i in range(8):
        cells = [" X " if i == j else (link if link.startswith("NV") or (i // 4 == j // 4) is False
                                       else "NODE") for j in range(8)]
        if not link.startswith("NV"):
            cells = [" X " if i == j else ("NODE" if i // 4 == j // 4 else "SYS") for j in range(8)]
        affinity = "0-55,112-167" if i < 4 else "56-111,168-223"
        rows.append(f"GPU{i}\t" + "\t".join(cells) + f"\tPXB\t{affinity}\t{i // 4}\t\tN/A")
    rows.append("NIC0\t" + "\t".join(["PXB"] * 8) + "\t X \t\t\t\t")
    legend = ("\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP "
              "interconnect between NUMA nodes (e.g., QPI/UPI)\n  NV#  = Connection traversing a "
              "bonded set of # NVLinks\n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    return "\n".join([header, *rows]) + "\n" + legend
