"""What each of the server's own limits read at one load: the checks behind "no limit of the
server's own was binding".

A queue is either a limit a flag sets (the batch at max_num_seqs, a full KV cache, engine steps
at their token budget: each its own rule in ``findings.server``) or the offered load exceeding
what the server serves (``findings.capacity``). Where neither can be shown, a verdict says which
checks ran and what each read, instead of pointing to a finding that is not there
(``findings.verdict``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from latscope.findings.server import BUDGET_USED, KV_SATURATED, budget_use
from latscope.model import MetricSnapshot
from latscope.server.metrics import gauge_series

if TYPE_CHECKING:
    from latscope.findings.capacity import GpuBusy
    from latscope.findings.inputs import Measured, ServerLimits


def limit_readings(m: Measured, limits: ServerLimits, gpu: GpuBusy | None) -> list[str]:
    """One phrase per check, each with the value it read: ``"running peaked at 180 of
    max_num_seqs 256 (not binding)"``; a check with nothing to read says so."""
    snaps = list(m.snapshots)
    return [_batch(snaps, limits), _kv(snaps), _budget(snaps, limits), _gpu(gpu)]


def _batch(snaps: list[MetricSnapshot], limits: ServerLimits) -> str:
    running = [v for _, v in gauge_series(snaps, "vllm:num_requests_running", combine=sum)]
    if not running:
        return "the batch: not read (no vllm:num_requests_running scrape)"
    peak = max(running)
    cap = limits.max_num_seqs
    if cap is None:
        return f"the batch peaked at {peak:g} running (max_num_seqs not known)"
    state = "binding" if peak >= cap else "not binding"
    return f"the batch peaked at {peak:g} running of max_num_seqs {cap} ({state})"


def _kv(snaps: list[MetricSnapshot]) -> str:
    kv = [v for _, v in gauge_series(snaps, "vllm:kv_cache_usage_perc", combine=max)]
    if not kv:
        return "the KV cache: not read (no vllm:kv_cache_usage_perc scrape)"
    peak = max(kv)
    state = "full" if peak >= KV_SATURATED else "not full"
    return f"the KV cache peaked at {peak:.0%} ({state})"


def _budget(snaps: list[MetricSnapshot], limits: ServerLimits) -> str:
    mbt = limits.max_num_batched_tokens
    used = budget_use(snaps, mbt)
    if used is None:
        why = "the budget not known" if not mbt else "no vllm:iteration_tokens_total"
        return f"the per-step token budget: not read ({why})"
    state = "at the budget" if used[0] >= BUDGET_USED else "below the budget"
    return (f"the mean engine step used {used[0]:.0%} of its {mbt}-token budget over "
            f"{used[1]:g} steps ({state})")


def _gpu(gpu: GpuBusy | None) -> str:
    if gpu is None:
        return "the GPU's busy share: not measured (no GPU telemetry or profile)"
    return f"the GPU was busy {gpu.share:.0%} of {gpu.of_what} at {gpu.where}"
