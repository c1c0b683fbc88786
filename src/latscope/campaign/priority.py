"""Short requests first inside the engine: vLLM's ``--scheduling-policy priority`` with each
request tagged by its predicted cost (``latscope gateway --policy tag``), proven by an A/B.

Where it fits (``priority_fits``, pure): queueing dominates TTFT and request sizes spread
(``gateway.fits.gateway_fits``, the same rule as the short-first gateway, for the same reason),
and latscope controls the server (local target or ``--serve-cmd``), because the fix is a restart
with a flag. The A/B (``prove_priority``): A the server as it is, direct; B the server restarted
with ``--scheduling-policy priority`` behind a tagging gateway (nothing held; each request's
``priority`` is its sjf deadline), alternating, short requests' mean TTFT the metric, long
requests' mean E2E and the steady throughput the guards, each with its 95% interval. The outcome
is "helped", "helped, at a cost" (a guard got worse with 95% confidence) or "did not help", and the
flag plus the tagging is proposed only when it helped. That B really ran with the policy is read
back from its log, not assumed.

Unlike the gateway's own queue, the tags hold nothing in the proxy, so a finished request's slot
is refilled in vLLM's next step (docs/gateway.md: the hop cost the gateway on the H200).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latscope.campaign.experiment import run_experiment
from latscope.campaign.proposals import Proposal
from latscope.campaign.servers import Change, Running, ServerControl
from latscope.gateway.fits import gateway_fits
from latscope.gateway.tags import policy_from_argv, policy_from_log
from latscope.results import ABResult

PRIORITY_FLAGS = ("--scheduling-policy", "priority")
METRIC, GUARDS = "short_ttft_mean_ms", ("long_e2e_mean_ms", "steady_rps")
TAG_OPTIONS: dict[str, Any] = {"policy": "tag"}
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PriorityFit:
    """``measure``: run the A/B; ``propose``: worth proposing (measured or not)."""

    propose: bool
    measure: bool
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)


def priority_fits(queue_share: float, sizes: Sequence[float], *, controlled: bool,
                  server_policy: str | None = None) -> PriorityFit:
    """Whether the priority A/B fits, from the queue's share of TTFT at the knee (0..1), the
    workload's per-request sizes (prompt + output tokens), whether latscope can restart the
    server, and the policy it runs with now (None: unknown)."""
    fit = gateway_fits(queue_share, sizes)
    evidence = {**fit.evidence, "controlled": controlled, "server_policy": server_policy}
    if not fit.propose:
        return PriorityFit(False, False, fit.reason, evidence)
    base = fit.reason.split(": short requests", 1)[0]
    if not controlled:
        return PriorityFit(True, False, f"{base}: vLLM's --scheduling-policy priority with "
                           "requests tagged by cost should serve short ones first; latscope "
                           "does not control the server, so it is proposed, not measured",
                           evidence)
    already = " (it runs priority already, untagged)" if server_policy == "priority" else ""
    return PriorityFit(True, True, f"{base}: the server's own queue could serve short requests "
                       f"first with --scheduling-policy priority and cost tags{already}",
                       evidence)


def prove_priority(queue_share: float, sizes: Sequence[float], *, finding_id: str,
                   control: ServerControl | None, running: Running | None, base: Any,
                   load: int, out_dir: Path, pairs: int, run_shape: Any = None,
                   progress: Progress = lambda _: None) -> ABResult | PriorityFit:
    """The priority A/B (its ``ABResult`` with ``measured``, ``server_policy`` per arm,
    ``outcome`` and ``proposal``), or, where it does not fit or cannot be measured, the fit that
    says why (``PriorityFit``: whether to propose it, and the reason). ``run_shape`` (a
    ``gateway.fits.RunShape``) sizes the runs to the aging horizon."""
    controlled = control is not None and running is not None and control.kind != "remote"
    current_policy = _policy_of(running, control)
    fit = priority_fits(queue_share, sizes, controlled=controlled, server_policy=current_policy)
    if not fit.measure:
        return fit
    assert control is not None and running is not None
    proposal = priority_proposal(finding_id, fit.reason, run_shape)
    progress(f"    proving {finding_id}: {proposal.describe()} at c={load}")
    exp = run_experiment(proposal, control, running, base, load, out_dir, pairs=pairs,
                         progress=progress).ab_result()
    exp.measured = True
    exp.server_policy = {"A": current_policy or "unknown", "B": _b_policy(out_dir) or "unknown"}
    if exp.server_policy["B"] != "priority":  # the A/B did not test what it says
        exp.helped, exp.verdict = False, ("failed: the B server did not run "
                                          "--scheduling-policy priority")
        exp.note = (exp.note or "") + " B's log does not show --scheduling-policy priority"
    exp.outcome = exp.words()
    if exp.outcome.startswith("helped"):
        exp.proposal = describe_fix()
    return exp


def priority_proposal(finding_id: str, why: str, run_shape: Any = None) -> Proposal:
    proposal = Proposal(finding_id, Change(flags=PRIORITY_FLAGS), metric=METRIC,
                        guard=GUARDS[0], more_guards=GUARDS[1:], why=why,
                        gateway=dict(TAG_OPTIONS))
    if run_shape is not None:
        proposal.requests, proposal.warmup = run_shape.requests, run_shape.warmup
        proposal.note = run_shape.describe().replace("sjf may", "the tags may")
    return proposal


def describe_fix() -> str:
    return (f"restart the server with {' '.join(PRIORITY_FLAGS)} and tag requests by cost: "
            "latscope gateway --upstream URL --policy tag (or set each request's `priority` "
            "to its predicted cost yourself)")


def _policy_of(running: Running | None, control: ServerControl | None) -> str | None:
    """The policy the server under diagnosis runs with: from its log, else its command line
    (the local target's argv holds only the extra vLLM flags)."""
    if running is None:
        return None
    if running.log_path is not None:
        try:
            policy = policy_from_log(running.log_path)
        except OSError:
            policy = None
        if policy:
            return policy
    argv = list(running.argv)
    if control is not None and control.kind == "local":
        argv = ["vllm", "serve", *argv]
    return policy_from_argv(argv) if argv else None


def _b_policy(out_dir: Path) -> str | None:
    """The policy B's server ran with, from its log (all of B's logs must agree)."""
    policies = set()
    for log in (p for d in out_dir.glob("server-B*") for p in d.rglob("*.log")):
        try:
            policies.add(policy_from_log(log))
        except OSError:
            continue
    policies.discard(None)
    return policies.pop() if len(policies) == 1 else None
