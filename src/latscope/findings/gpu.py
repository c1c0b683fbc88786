"""GPU checks that need the detected GPU (inventory, gfx arch, AITER, visible devices, NCCL
channels, topology, other tenants); each id is documented in docs/findings.md. The facts come from
``latscope.env.gpu``.
"""

from __future__ import annotations

import re

from latscope.env.facts import Facts
from latscope.findings import reference as _ref
from latscope.findings.checkbase import ev, skipped
from latscope.model import Finding, Severity

REF = "docs/findings.md"
AMD_VLLM_DOC = ("https://rocm.docs.amd.com/en/docs-7.2.0/how-to/rocm-for-ai/"
                "inference-optimization/vllm-optimization.html")
AMD_GPU_SPECS = "https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html"
HIP_ENV_DOC = "https://rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html"


GOOD_LINK = {"nvidia": re.compile(r"NV\d+"), "amd": re.compile(r"XGMI")}


def check_gpu_inventory(facts: Facts) -> list[Finding]:
    g = facts.gpu
    if not g.vendor:
        tools = ", ".join(dict.fromkeys(k.split("_")[0] for k in g.tools_missing))
        return [skipped("gpu.inventory", f"no GPU found (no {tools} output; no GPU in sysfs)", "gpu")]
    evidence = [ev(f"GPU{x.index}", " ".join(p for p in (x.name, x.gfx, x.bus_id) if p),
                   g.gpus_source) for x in g.gpus]
    if not evidence:
        evidence = [ev(p.bdf, p.vendor, g.gpus_source) for p in g.pci]
    evidence += [ev(k, v, g.versions.get(f"{k}_source", g.gpus_source))
                 for k, v in g.versions.items() if not k.endswith("_source")]
    count = len(g.gpus) or len(g.pci)
    return [Finding("gpu.inventory", Severity.INFO, f"{count} {g.vendor.upper()} GPU(s) found",
                    evidence, layer="gpu")]


def _arch_list(value: str) -> list[str]:
    return [a for a in re.split(r"[;,\s]+", value) if a]


def check_rocm_arch(facts: Facts) -> list[Finding]:
    if facts.gpu.vendor != "amd":
        return [skipped("gpu.rocm_arch", "no AMD GPU", "gpu")]
    detected = sorted({x.gfx.split(":")[0] for x in facts.gpu.gpus if x.gfx})
    if not detected:
        return [skipped("gpu.rocm_arch", "no gfx target read (no amd-smi, rocminfo or rocm-smi)",
                        "gpu")]
    value = facts.env.get("PYTORCH_ROCM_ARCH")
    evidence = [ev("detected gfx", ",".join(detected), facts.gpu.gpus_source),
                ev("PYTORCH_ROCM_ARCH", "(unset)" if value is None else value, facts.env_source)]
    missing = [d for d in detected if value is not None and d not in _arch_list(value)]
    if missing:
        return [Finding(
            "gpu.rocm_arch", Severity.CRITICAL,
            f"PYTORCH_ROCM_ARCH does not include the GPU's {', '.join(missing)}", evidence,
            why="Kernels built (or JIT-compiled) for another gfx target are missing or fall back.",
            fix=f"rebuild with PYTORCH_ROCM_ARCH={';'.join(detected)} or use the matching image",
            reference=_ref("gpu.rocm_arch", AMD_GPU_SPECS), layer="gpu")]
    return [Finding("gpu.rocm_arch", Severity.OK, "PYTORCH_ROCM_ARCH matches the GPU (or is unset)",
                    evidence, layer="gpu")]


def check_aiter(facts: Facts) -> list[Finding]:
    gfx = {x.gfx.split(":")[0] for x in facts.gpu.gpus}
    if facts.gpu.vendor != "amd" or not gfx & {"gfx942", "gfx950"}:
        return [skipped("gpu.rocm_aiter", "no gfx942/gfx950 GPU", "gpu")]
    value = facts.env.get("VLLM_ROCM_USE_AITER")
    evidence = [ev("VLLM_ROCM_USE_AITER", "(unset)" if value is None else value, facts.env_source),
                ev("detected gfx", ",".join(sorted(gfx)), facts.gpu.gpus_source)]
    if value is not None and value.strip() not in ("", "0", "false", "False"):
        return [Finding("gpu.rocm_aiter", Severity.OK, "AITER kernels enabled", evidence, layer="gpu")]
    return [Finding(
        "gpu.rocm_aiter", Severity.WARNING, "AITER kernels are off on an MI300/MI350-class GPU",
        evidence, why="Without VLLM_ROCM_USE_AITER=1 vLLM uses generic Triton kernels.",
        fix="VLLM_ROCM_USE_AITER=1 (measure: latscope bench before and after)",
        reference=_ref("gpu.rocm_aiter", AMD_VLLM_DOC), layer="gpu")]


def check_visible_devices(facts: Facts) -> list[Finding]:
    hip, cuda = facts.env.get("HIP_VISIBLE_DEVICES"), facts.env.get("CUDA_VISIBLE_DEVICES")
    evidence = [ev("HIP_VISIBLE_DEVICES", hip or "(unset)", facts.env_source),
                ev("CUDA_VISIBLE_DEVICES", cuda or "(unset)", facts.env_source)]
    if hip is not None and hip != cuda:
        return [Finding(
            "gpu.visible_devices", Severity.WARNING, "HIP_VISIBLE_DEVICES is set and differs from "
            "CUDA_VISIBLE_DEVICES", evidence,
            why="Both apply on ROCm, so the process may see another GPU set than intended; vLLM "
                "0.33 refuses to start.", fix="use CUDA_VISIBLE_DEVICES only",
            reference=_ref("gpu.visible_devices", HIP_ENV_DOC), layer="gpu")]
    return [Finding("gpu.visible_devices", Severity.OK, "no conflicting *_VISIBLE_DEVICES", evidence,
                    layer="gpu")]


def tensor_parallel_size(facts: Facts) -> tuple[int | None, str]:
    value, source = facts.server.settings.get("tensor_parallel_size", (None, ""))
    return (int(value), source) if value is not None else (None, "")


def check_nccl_channels(facts: Facts) -> list[Finding]:
    names = " ".join(x.name for x in facts.gpu.gpus)
    tp, tp_source = tensor_parallel_size(facts)
    if facts.gpu.vendor != "amd" or "MI300X" not in names.upper():
        return [skipped("gpu.nccl_min_nchannels", "no MI300X", "gpu")]
    if tp is None or tp < 2:
        return [skipped("gpu.nccl_min_nchannels", "tensor parallel size unknown or 1", "gpu")]
    value = facts.env.get("NCCL_MIN_NCHANNELS")
    evidence = [ev("NCCL_MIN_NCHANNELS", value or "(unset)", facts.env_source),
                ev("tensor_parallel_size", tp, tp_source)]
    if value == "112":
        return [Finding("gpu.nccl_min_nchannels", Severity.OK, "NCCL_MIN_NCHANNELS=112", evidence,
                        layer="gpu")]
    return [Finding("gpu.nccl_min_nchannels", Severity.INFO, "NCCL_MIN_NCHANNELS is not 112 on "
                    "MI300X with TP>1", evidence, why="Fewer RCCL channels slow the all-reduce.",
                    fix="NCCL_MIN_NCHANNELS=112; measure ITL",
                    reference=_ref("gpu.nccl_min_nchannels", AMD_VLLM_DOC),
                    layer="gpu")]


def check_topology(facts: Facts) -> list[Finding]:
    topo = facts.gpu.topology
    if not facts.gpu.vendor:
        return [skipped("gpu.topology", "no GPU", "gpu")]
    if topo is None:
        tool = "nvidia-smi" if facts.gpu.vendor == "nvidia" else "rocm-smi"
        return [skipped("gpu.topology", f"no {tool} topology output", "gpu")]
    if len(topo.gpus) < 2:
        return [Finding("gpu.topology", Severity.OK, "one GPU: no GPU-to-GPU links",
                        [ev("GPUs in topology", len(topo.gpus), facts.gpu.topology_source)],
                        layer="gpu")]
    tp, tp_source = tensor_parallel_size(facts)
    group = topo.gpus[:tp] if tp and tp > 1 else topo.gpus
    good = GOOD_LINK[facts.gpu.vendor]
    slow = {f"{a}-{b}": v for (a, b), v in topo.links.items()
            if a in group and b in group and a < b and not good.fullmatch(v)}
    kinds = sorted(set(topo.links.values()))
    evidence = [ev("link types", ",".join(kinds), facts.gpu.topology_source)]
    evidence += [ev(pair, link, facts.gpu.topology_source) for pair, link in list(slow.items())[:8]]
    if tp:
        evidence.append(ev("tensor_parallel_size", tp, tp_source))
    if not slow:
        return [Finding("gpu.topology", Severity.OK, "GPU pairs linked by NVLink/XGMI", evidence,
                        layer="gpu")]
    severity = Severity.WARNING if tp and tp > 1 else Severity.INFO
    return [Finding(
        "gpu.topology", severity, f"{len(slow)} GPU pair(s) linked over PCIe/host, not NVLink/XGMI",
        evidence, why="Tensor-parallel all-reduce across such pairs adds latency to every layer.",
        fix="place TP ranks on GPUs of one NVLink/XGMI island (CUDA_VISIBLE_DEVICES)",
        reference=_ref("gpu.topology", AMD_VLLM_DOC), layer="gpu")]


def check_gpu_tenants(facts: Facts) -> list[Finding]:
    if facts.gpu.vendor != "nvidia":
        return [skipped("gpu.tenants", "process list read from nvidia-smi only", "gpu")]
    procs = facts.gpu.processes
    src = facts.gpu.processes_source
    if facts.pid is None:
        if not procs:
            return [Finding("gpu.tenants", Severity.OK, "no processes on the GPUs",
                            [ev("processes", 0, src)], layer="gpu")]
        return [Finding("gpu.tenants", Severity.INFO, f"{len(procs)} process(es) use the GPUs "
                        "(server pid unknown, cannot tell tenants apart)",
                        [ev(f"pid {p.pid}", f"{p.name} {p.used_mib or '?'} MiB", src) for p in procs],
                        layer="gpu")]
    facts.sys.need("gpu_tenants")
    ours = facts.sys.server_processes
    others = [p for p in procs if p.pid not in ours]
    if not others:
        return [Finding("gpu.tenants", Severity.OK, "no other process on the GPUs",
                        [ev("processes", len(procs), src)], layer="gpu")]
    return [Finding(
        "gpu.tenants", Severity.WARNING, f"{len(others)} other process(es) share the GPUs",
        [ev(f"pid {p.pid}", f"{p.name} {p.used_mib or '?'} MiB", src) for p in others],
        why="Other tenants take SMs, memory bandwidth and memory the server counted on.",
        fix="isolate the server's GPUs", reference=f"{REF}#gpu.tenants", layer="gpu")]


GPU_CHECKS = (check_gpu_inventory, check_rocm_arch, check_aiter, check_visible_devices,
              check_nccl_channels, check_topology, check_gpu_tenants)
