"""Which fix a finding gets: a ``Proposal`` (the change to the server's launch, the metric it
should move, its guards and run shape) from the fix its rule declares (``findings.fixes``: a new
flag or environment fix is one maker and one row there). ``campaign.experiment`` measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.campaign.servers import Change, ServerControl
from latscope.findings.fixes import ServerLaunch, fix_for
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


# --- which fix each finding gets: declared beside the rules (findings.fixes), applied here ----

def propose(finding: Finding, control: ServerControl, load: int) -> Proposal | None:
    """The launch change that the finding's fix names (``findings.fixes``), as a proposal to
    measure, or None when it is not a flag or env change latscope can make."""
    server = ServerLaunch(tuple(control.argv), dict(control.env), control.kind)
    plan = fix_for(finding, server, load)
    if plan is None:
        return None
    return Proposal(plan.finding_id, Change(flags=plan.flags, remove=plan.remove,
                                            set_env=plan.set_env, unset_env=plan.unset_env),
                    metric=plan.metric, guard=plan.guard, why=plan.why,
                    cost_measurable=plan.cost_measurable, note=plan.note)
