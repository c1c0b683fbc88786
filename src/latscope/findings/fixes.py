"""Each rule's fix, declared beside the rules: the launch change (flags, environment) that the
finding's fix names, the metric it should move, its guard, and whether this host can show it.

``fix_for(finding, server, load)`` gives the ``FixPlan``; ``campaign.proposals`` only applies it
(a ``Change`` to the server's launch) and ``campaign.experiment`` measures it. A new flag or
environment fix is one maker here and one row in ``FIXES``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from latscope.model import Finding

# the env vars whose cost only a GPU shows: the CPU build launches no GPU kernel
GPU_ONLY_ENV = ("CUDA_LAUNCH_BLOCKING", "HIP_LAUNCH_BLOCKING", "AMD_SERIALIZE_KERNEL",
                "AMD_SERIALIZE_COPY")


@dataclass(frozen=True, slots=True)
class ServerLaunch:
    """How the server under diagnosis was started, as far as latscope knows: its command line
    (the local target's holds only the extra vLLM flags), its environment, and ``kind``: "local"
    (the embedded CPU target), "command" (``--serve-cmd``) or "remote" (``--url``: read, not
    controlled)."""

    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    kind: str = "remote"


@dataclass(frozen=True, slots=True)
class FixPlan:
    """A finding's fix as a change to the server's launch, and the metric it should move."""

    finding_id: str
    flags: tuple[str, ...] = ()  # added (or replacing the flag's value)
    remove: tuple[str, ...] = ()  # flags removed
    set_env: tuple[tuple[str, str], ...] = ()
    unset_env: tuple[str, ...] = ()
    metric: str = "ttft_mean_ms"
    guard: str | None = None
    why: str = ""
    cost_measurable: bool = True  # False: the change cannot show its effect on this host
    note: str = ""


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag V`` or ``--flag=V`` in a command line (the last one wins, as in
    argparse)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def fix_for(finding: Finding, server: ServerLaunch, load: int) -> FixPlan | None:
    """The launch change that the finding's fix names, or None when it is not a flag or env
    change latscope can make."""
    maker = FIXES.get(finding.id)
    return maker(finding, server, load) if maker else None


def _evidence(finding: Finding, name: str) -> Any:
    return next((e.value for e in finding.evidence if e.name == name), None)


def _as_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def more_seqs(finding: Finding, server: ServerLaunch, load: int) -> FixPlan | None:
    current = _as_int(_evidence(finding, "max_num_seqs")
                      or flag_value(server.argv, "--max-num-seqs"))
    if current is None:
        return None
    return FixPlan(finding.id, flags=("--max-num-seqs", str(max(current * 4, load))),
                   why=f"max_num_seqs {current} caps the batch below the {load} requests in "
                       "flight")


def more_budget(finding: Finding, server: ServerLaunch, load: int) -> FixPlan | None:
    current = _as_int(_evidence(finding, "max_num_batched_tokens")
                      or flag_value(server.argv, "--max-num-batched-tokens"))
    if current is None:
        return None
    return FixPlan(finding.id, flags=("--max-num-batched-tokens", str(current * 2)),
                   why="the per-step token budget admits prompts too slowly")


def more_kv(finding: Finding, server: ServerLaunch, load: int) -> FixPlan | None:
    for flag in ("--num-gpu-blocks-override", "--kv-cache-memory-bytes"):
        if flag_value(server.argv, flag) is not None:
            return FixPlan(finding.id, remove=(flag,),
                           why=f"{flag} limits the KV cache below what the load needs")
    if server.kind == "local":
        space = int(server.env.get("VLLM_CPU_KVCACHE_SPACE") or 1)
        return FixPlan(finding.id, set_env=(("VLLM_CPU_KVCACHE_SPACE", str(space * 2)),),
                       why="a larger CPU KV cache")
    util = flag_value(server.argv, "--gpu-memory-utilization")
    current = float(util) if util else 0.9
    if current >= 0.95:
        return None
    return FixPlan(finding.id, flags=("--gpu-memory-utilization",
                                      f"{min(0.95, current + 0.05):.2f}"),
                   why="more GPU memory for the KV cache")


def no_debug(finding: Finding, server: ServerLaunch, load: int) -> FixPlan:
    return FixPlan(finding.id, unset_env=("VLLM_LOGGING_LEVEL",),
                   why="INFO logging instead of DEBUG")


def no_request_log(finding: Finding, server: ServerLaunch, load: int) -> FixPlan | None:
    if "--enable-log-requests" not in server.argv:
        return None
    return FixPlan(finding.id, remove=("--enable-log-requests",), why="no per-request log lines")


def no_eager(finding: Finding, server: ServerLaunch, load: int) -> FixPlan | None:
    """CUDA/HIP graphs back on: the flag removed (a restart recompiles and captures the graphs;
    vLLM's compile cache makes the second start quicker). The cost is in decode steps (ITL 13 ms
    eager against 5 ms with graphs on an H200), so TPOT is the metric; TTFT, which graphs barely
    move, is the guard."""
    if "--enforce-eager" not in server.argv:
        return None
    cpu = server.kind == "local"  # the CPU build runs eager whatever the flag
    return FixPlan(finding.id, remove=("--enforce-eager",), metric="tpot_mean_ms",
                   guard="ttft_mean_ms",
                   why="CUDA graphs replace per-kernel launches on every decode step",
                   cost_measurable=not cpu,
                   note="the CPU build has no CUDA graphs: measure it on the GPU server"
                   if cpu else "")


def unset_env(finding: Finding, server: ServerLaunch, load: int) -> FixPlan | None:
    """The doctor's environment rules cite each offending variable as evidence by name."""
    names = [e.name for e in finding.evidence
             if e.name.replace("_", "").isalnum() and e.name.isupper() and e.value != "(unset)"]
    if not names:
        return None
    gpu_only = any(n in GPU_ONLY_ENV for n in names)
    cpu = server.kind == "local"
    return FixPlan(finding.id, unset_env=tuple(names), why=f"{', '.join(names)} unset",
                   cost_measurable=not (gpu_only and cpu),
                   note=("its cost cannot be measured on this host: the CPU build launches no "
                         "GPU kernels" if gpu_only and cpu else ""))


def default_budget(finding: Finding, server: ServerLaunch, load: int) -> FixPlan | None:
    """A non-default token budget that trades TTFT for ITL (``server.budget_trade``): vLLM's
    default budget back, measured on both sides of the trade (TTFT the metric, TPOT the
    guard), never assumed."""
    if flag_value(server.argv, "--max-num-batched-tokens") is None:
        return None
    return FixPlan(finding.id, remove=("--max-num-batched-tokens",), metric="ttft_mean_ms",
                   guard="tpot_mean_ms",
                   why="vLLM's default per-step token budget instead of the one set: the "
                       "trade between TTFT and ITL measured, not assumed")


FIXES: dict[str, Callable[[Finding, ServerLaunch, int], FixPlan | None]] = {
    "server.queue_max_num_seqs": more_seqs,
    "server.queue_token_budget": more_budget,
    "server.kv_saturation": more_kv,
    "server.preemptions": more_kv,
    "server.debug_logging": no_debug,
    "server.request_logging": no_request_log,
    "server.enforce_eager": no_eager,
    "server.trace_function": unset_env,
    "gpu.launch_blocking": unset_env,
    "gpu.serialize": unset_env,
    "gpu.amd_log_level": unset_env,
    "gpu.nccl_debug": unset_env,
    "server.budget_trade": default_budget,
}
