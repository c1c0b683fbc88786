"""What the fleet's rules read: every replica's facts over one window, each replica's own
diagnosis, and, when measured, what the router costs."""

from __future__ import annotations

from dataclasses import dataclass, field

from latscope.fleet.facts import ReplicaFacts
from latscope.model import Finding
from latscope.results import Verdict


@dataclass(frozen=True, slots=True)
class ReplicaConclusion:
    """One replica's own diagnosis of the window (the single-server rules, per replica)."""

    name: str
    ranked: tuple[Finding, ...]
    verdict: Verdict
    shares: dict[str, float] = field(default_factory=dict)  # queue / prefill / other of TTFT


@dataclass(frozen=True, slots=True)
class RouterFacts:
    """The TTFT a client saw through the balancer (or a gateway reported) beside the replicas'
    own TTFT over the same window: their difference is the balancer's and the network's."""

    source: str  # "latscope's client through http://..." | "gateway metric NAME"
    front_ttft_s: float  # mean TTFT at the front (client or gateway)
    front_count: int
    replica_ttft_s: float  # the replicas' own mean TTFT, weighted by their request counts
    replica_count: float
    send_lag_s: float = 0.0  # the client's own lateness, off the front's TTFT first
    reliable: bool = True  # the client's own timing held (campaign.observe's judgement)
    why_unreliable: str = ""
    # the balancer's own hop: GET /health round trips (keep-alive, p50) through the balancer
    # less straight to the replicas; None where not probed
    hop_s: float | None = None
    front_rtt_s: float | None = None
    direct_rtt_s: float | None = None
    rtt_probes: int = 0


@dataclass(frozen=True, slots=True)
class FleetFacts:
    label: str  # where it was measured: "the window 01:10:05-01:12:40 UTC"
    replicas: tuple[ReplicaFacts, ...]
    conclusions: dict[str, ReplicaConclusion] = field(default_factory=dict)
    router: RouterFacts | None = None
    step_s: float = 0.0
    source: str = ""  # "Prometheus at URL" | "latscope's scrapes of each replica"

    def replica(self, name: str) -> ReplicaFacts | None:
        return next((r for r in self.replicas if r.name == name), None)
