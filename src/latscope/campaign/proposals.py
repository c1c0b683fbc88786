"""Which fix a finding gets: a ``Proposal`` (the change to the server's launch, the metric it
should move, its guards and run shape) made by the finding's maker in ``_FIXES``; a new flag or
environment fix is one maker and one row there. ``campaign.experiment`` measures it (A/B).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from latscope.campaign.servers import Change, ServerControl, flag_value
from latscope.model import Finding


@dataclass
class Proposal:
    """A fix for a finding, as a change to the server's launch, and the metric it should move."""

    finding_id: str
    change: Change
    metric: str = "ttft_mean_ms"
    why: str = ""
    cost_measurable: bool = True  # False: the change cannot show its effect on this host
    note: str = ""
    # B is the same server behind latscope's gateway (these GatewayConfig options), not a
    # relaunch: the fix no server flag gives (docs/gateway.md). With ``change`` too, B is the
    # server relaunched with the change *and* behind the gateway (--scheduling-policy priority
    # with the gateway's tags: campaign.priority)
    gateway: dict[str, Any] | None = None
    # a second metric the fix must not make much worse, measured and reported beside the first
    guard: str | None = None
    # measured and warm-up requests per run, where the fix needs longer runs than
    # ``requests_per_run`` (the gateway: ``gateway.fits.gateway_run_shape``)
    requests: int | None = None
    warmup: int | None = None
    # further guards, each measured per run and reported with its interval under "guards"
    # (``throughput_rps``, ``steady_rps``: higher is better; latencies: lower is better)
    more_guards: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.gateway is not None:
            shown = {k: v for k, v in self.gateway.items() if k not in _UNSHOWN}
            text = "latscope gateway " + " ".join(
                f"--{k.replace('_', '-')} {'auto' if v is None else v}" for k, v in shown.items())
            return f"{self.change.describe()} + {text}" if self.relaunches_with_gateway else text
        return self.change.describe()

    @property
    def relaunches_with_gateway(self) -> bool:
        c = self.change
        return self.gateway is not None and bool(c.flags or c.remove or c.set_env or c.unset_env)


# gateway options of a run's own (a path on this host), not of the change proposed
_UNSHOWN = ("tokenizer", "server_log")


# --- which fix each finding gets -------------------------------------------------------------

def propose(finding: Finding, control: ServerControl, load: int) -> Proposal | None:
    """The launch change that the finding's fix names, or None when it is not a flag or env
    change latscope can make."""
    maker = _FIXES.get(finding.id)
    return maker(finding, control, load) if maker else None


def _evidence(finding: Finding, name: str) -> Any:
    return next((e.value for e in finding.evidence if e.name == name), None)


def _more_seqs(finding: Finding, control: ServerControl, load: int) -> Proposal | None:
    current = _evidence(finding, "max_num_seqs") or flag_value(control.argv, "--max-num-seqs")
    try:
        current = int(current) if current is not None else None
    except (TypeError, ValueError):
        current = None
    if current is None:
        return None
    new = max(current * 4, load)
    return Proposal(finding.id, Change(flags=("--max-num-seqs", str(new))),
                    why=f"max_num_seqs {current} caps the batch below the {load} requests in "
                        "flight")


def _more_budget(finding: Finding, control: ServerControl, load: int) -> Proposal | None:
    current = _evidence(finding, "max_num_batched_tokens") or flag_value(
        control.argv, "--max-num-batched-tokens")
    if current is None:
        return None
    try:
        new = int(current) * 2
    except (TypeError, ValueError):
        return None
    return Proposal(finding.id, Change(flags=("--max-num-batched-tokens", str(new))),
                    why="the per-step token budget admits prompts too slowly")


def _more_kv(finding: Finding, control: ServerControl, load: int) -> Proposal | None:
    argv = control.argv
    for flag in ("--num-gpu-blocks-override", "--kv-cache-memory-bytes"):
        if flag_value(argv, flag) is not None:
            return Proposal(finding.id, Change(remove=(flag,)),
                            why=f"{flag} limits the KV cache below what the load needs")
    if control.kind == "local":
        space = int(control.env.get("VLLM_CPU_KVCACHE_SPACE") or 1)
        return Proposal(finding.id, Change(set_env=(("VLLM_CPU_KVCACHE_SPACE", str(space * 2)),)),
                        why="a larger CPU KV cache")
    util = flag_value(argv, "--gpu-memory-utilization")
    current = float(util) if util else 0.9
    if current >= 0.95:
        return None
    return Proposal(finding.id, Change(flags=("--gpu-memory-utilization",
                                              f"{min(0.95, current + 0.05):.2f}")),
                    why="more GPU memory for the KV cache")


def _no_debug(finding: Finding, control: ServerControl, load: int) -> Proposal:
    return Proposal(finding.id, Change(unset_env=("VLLM_LOGGING_LEVEL",)),
                    why="INFO logging instead of DEBUG")


def _no_request_log(finding: Finding, control: ServerControl, load: int) -> Proposal | None:
    if "--enable-log-requests" not in control.argv:
        return None
    return Proposal(finding.id, Change(remove=("--enable-log-requests",)),
                    why="no per-request log lines")


def _no_eager(finding: Finding, control: ServerControl, load: int) -> Proposal | None:
    """CUDA/HIP graphs back on: the flag removed (a restart recompiles and captures the graphs;
    vLLM's compile cache makes the second start quicker)."""
    if "--enforce-eager" not in control.argv:
        return None
    cpu = control.kind == "local"  # the CPU build runs eager whatever the flag
    # the cost is in decode steps (ITL 13 ms eager against 5 ms with graphs on an H200), so
    # TPOT is the metric; TTFT, which graphs barely move, is the guard
    return Proposal(finding.id, Change(remove=("--enforce-eager",)), metric="tpot_mean_ms",
                    guard="ttft_mean_ms",
                    why="CUDA graphs replace per-kernel launches on every decode step",
                    cost_measurable=not cpu,
                    note="the CPU build has no CUDA graphs: measure it on the GPU server"
                    if cpu else "")


def _unset_env_fix(finding: Finding, control: ServerControl, load: int) -> Proposal | None:
    """The doctor's environment rules cite each offending variable as evidence by name."""
    names = [e.name for e in finding.evidence
             if e.name.replace("_", "").isalnum() and e.name.isupper() and e.value != "(unset)"]
    if not names:
        return None
    gpu_only = any(n in ("CUDA_LAUNCH_BLOCKING", "HIP_LAUNCH_BLOCKING", "AMD_SERIALIZE_KERNEL",
                         "AMD_SERIALIZE_COPY") for n in names)
    cpu = control.kind == "local"
    return Proposal(finding.id, Change(unset_env=tuple(names)), why=f"{', '.join(names)} unset",
                    cost_measurable=not (gpu_only and cpu),
                    note=("its cost cannot be measured on this host: the CPU build launches no "
                          "GPU kernels" if gpu_only and cpu else ""))


_FIXES: dict[str, Callable[[Finding, ServerControl, int], Proposal | None]] = {
    "server.queue_max_num_seqs": _more_seqs,
    "server.queue_token_budget": _more_budget,
    "server.kv_saturation": _more_kv,
    "server.preemptions": _more_kv,
    "server.debug_logging": _no_debug,
    "server.request_logging": _no_request_log,
    "server.enforce_eager": _no_eager,
    "server.trace_function": _unset_env_fix,
    "gpu.launch_blocking": _unset_env_fix,
    "gpu.serialize": _unset_env_fix,
    "gpu.amd_log_level": _unset_env_fix,
    "gpu.nccl_debug": _unset_env_fix,
}
