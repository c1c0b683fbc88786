"""Fleet rules about one replica's state set against the others' (a stall, preemptions, other
settings, a restart, a replica gone) and the router's part of TTFT. Thresholds and wording:
docs/findings.md, one section per id."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from latscope.findings.fleetcause import config_differences
from latscope.findings.impact import ImpossibleShare, make_impact, severity_for_share
from latscope.fleet.facts import upper_median
from latscope.fleet.model import FleetFacts, RouterFacts
from latscope.model import Evidence, Finding, Severity

REF = "docs/findings.md"
STALL_MIN_S = 10.0  # requests in flight and no token computed for this long is a stall
STALL_MIN_STEPS = 2  # ... over at least this many step intervals
PREEMPT_RATIO = 5.0  # preemptions per request at this multiple of the others' (or they none)
ROUTER_INFO = 0.05  # the router's share of TTFT reported from here (a warning from 20%)
GONE_STEPS = 2  # a replica whose series end this many steps before the window's end is gone


def state_findings(facts: FleetFacts) -> list[Finding]:
    return [f for f in (stalled(facts), preempting(facts), config_mismatch(facts),
                        router_share(facts), restarted(facts), gone(facts)) if f is not None]


def _at(t: float | None) -> str:
    return "?" if t is None else time.strftime("%H:%M:%S", time.gmtime(t)) + " UTC"


def stalled(facts: FleetFacts) -> Finding | None:
    """A replica that held requests and computed no token for ``STALL_MIN_S`` or more."""
    least = max(STALL_MIN_S, STALL_MIN_STEPS * facts.step_s)
    found = sorted((r for r in facts.replicas if r.stall_s >= least), key=lambda r: -r.stall_s)
    if not found:
        return None
    top = found[0]
    alone = len(found) < len(facts.replicas)
    others = "the others did not" if alone else "every replica did"
    impact = _excess_ttft(facts, top.name) if alone else None
    severity = severity_for_share(impact["share"]) if impact else Severity.WARNING
    if severity.rank > Severity.WARNING.rank:  # a stall is never mere information
        severity = Severity.WARNING
    return Finding(
        id="fleet.replica_stall", severity=severity, impact=impact,
        title=(f"replica {top.name} stalled for {top.stall_s:.0f} s from {_at(top.stall_at)}: "
               f"requests running or waiting and no token computed ({others})"),
        evidence=[Evidence(f"{r.name} longest stall", round(r.stall_s, 1), "s",
                           "vllm:num_requests_running + waiting > 0 while "
                           "vllm:generation_tokens_total and prompt_tokens_total stood still")
                  for r in facts.replicas],
        why=("Its requests wait with no progress; /health may still answer 200 (a stalled "
             "engine loop is not a dead API server)."),
        fix=(f"Read {top.name}'s log around {_at(top.stall_at)} (engine core errors, a hung "
             "collective, the host swapping); restart it, and alert on queue time, not /health."),
        reference=f"{REF}#fleet.replica_stall", layer="stall", role="cause")


def _excess_ttft(facts: FleetFacts, name: str) -> dict[str, Any] | None:
    """What the stalled replica's requests waited beyond the others' (upper) median TTFT, as a
    share of the fleet's summed TTFT: the stall is read from its counters, so its requests'
    excess is its cost even where their few intervals leave the ratio's interval wide (18 s
    stalled: 11.9 s mean TTFT against 0.6 s, an interval from 112 ms)."""
    ttft = {r.name: lat for r in facts.replicas if (lat := r.latency.get("ttft")) is not None
            and lat.count > 0 and lat.mean is not None}
    mine = ttft.get(name)
    others = np.array([lat.sum_s / lat.count for n, lat in ttft.items() if n != name])
    total = sum(lat.sum_s for lat in ttft.values())
    if mine is None or not others.size or total <= 0:
        return None
    excess = mine.sum_s - mine.count * float(upper_median(others))
    if excess <= 0:
        return None
    try:
        return make_impact("server_ttft_mean", excess / total, measured_at=facts.label)
    except ImpossibleShare:
        return None


def preempting(facts: FleetFacts) -> Finding | None:
    """A replica that preempts while the others do not (or far less per request)."""
    rate = {r.name: (r.preemptions or 0) / r.finished for r in facts.replicas
            if r.finished and r.preemptions is not None}
    if len(rate) < 2:
        return None
    top = max(rate, key=lambda k: rate[k])
    others = [v for k, v in rate.items() if k != top]
    if rate[top] <= 0 or (max(others) > 0 and rate[top] < PREEMPT_RATIO * max(others)):
        return None
    r = next(x for x in facts.replicas if x.name == top)
    return Finding(
        id="fleet.replica_preemptions", severity=Severity.WARNING,
        title=(f"replica {top} preempted {r.preemptions:g} times ({rate[top]:.2f} per request; "
               f"the others {max(others):.2f}); its KV cache peaked at "
               f"{'?' if r.kv_peak is None else f'{r.kv_peak:.0%}'}"),
        evidence=[Evidence(f"{x.name} preemptions", x.preemptions, f"for {x.finished:g} requests, "
                           f"KV peak {x.kv_peak}", "vllm:num_preemptions_total")
                  for x in facts.replicas if x.finished],
        why="A preempted request loses its KV cache and is computed again: that replica's "
            "requests stall while the others' do not.",
        fix=(f"Give {top} the KV cache the others have (--gpu-memory-utilization, its GPU, "
             "--max-num-seqs), or send it less."),
        reference=f"{REF}#fleet.replica_preemptions", layer="queue", role="cause")


def config_mismatch(facts: FleetFacts) -> Finding | None:
    """Replicas whose published settings (``vllm:*_info``) differ."""
    diffs = config_differences(facts)
    if not diffs:
        return None
    evidence = []
    for family, key, groups in diffs:
        for value, names in groups.items():
            evidence.append(Evidence(f"{family}{{{key}}}", value, f"on {', '.join(names)}",
                                     facts.source))
    family, key, groups = diffs[0]
    odd = min(groups.items(), key=lambda kv: len(kv[1]))
    keys = sorted({k for _, k, _ in diffs})
    return Finding(
        id="fleet.config_mismatch", severity=Severity.WARNING,
        title=(f"Replicas run different settings: {', '.join(keys[:5])}"
               f"{' ...' if len(keys) > 5 else ''} ({key}={odd[0]} on {', '.join(odd[1])})"),
        evidence=evidence,
        why=("Replicas behind one balancer are expected to be alike; a replica with a smaller "
             "KV cache or other cache settings is slower or preempts under the same traffic."),
        fix="Deploy every replica from one configuration (same flags, same GPU type).",
        reference=f"{REF}#fleet.config_mismatch", layer="config", role="cause")


def restarted(facts: FleetFacts) -> Finding | None:
    """Replicas whose counters started again from zero inside the window (one finding: the
    conclusion keeps one per id)."""
    found = [(r, sorted(set(r.restarts) | set(r.resets))) for r in facts.replicas
             if r.restarts or r.resets]
    if not found:
        return None
    names = "; ".join(f"{r.name} at {', '.join(_at(t) for t in times[:3])}"
                      for r, times in found)
    evidence = []
    for r, _ in found:
        evidence += [Evidence(f"{r.name} counter resets", len(r.resets), "", facts.source),
                     Evidence(f"{r.name} process_start_time_seconds changes", len(r.restarts),
                              "", facts.source)]
        evidence += [Evidence(f"{r.name} not scraped (up 0)", f"{_at(a)} to {_at(b)}", "",
                              facts.source) for a, b in r.down]
    return Finding(
        id="fleet.replica_restarted", severity=Severity.INFO,
        title=(f"{'replica' if len(found) == 1 else f'{len(found)} replicas'} restarted in "
               f"the window ({names}): counters count from zero after that, as Prometheus' "
               "increase() does"),
        evidence=evidence,
        why="A restart drops its in-flight requests and its caches (prefix cache, CUDA "
            "graphs warm up again).",
        fix="Read the replica's log for why it restarted (out of memory, a crash, a deploy).",
        reference=f"{REF}#fleet.replica_restarted", layer="config", role="cause")


def gone(facts: FleetFacts) -> Finding | None:
    """Replicas whose series end before the window does: Prometheus lost them."""
    end = max((r.last_t for r in facts.replicas if r.last_t is not None), default=None)
    if end is None:
        return None
    lost = [r for r in facts.replicas if r.last_t is not None
            and end - r.last_t >= GONE_STEPS * max(facts.step_s, 1.0)]
    if not lost:
        return None
    parts = []
    for r in lost:
        assert r.last_t is not None  # lost holds replicas with a last sample
        down = next((a for a, _ in reversed(r.down)), None)
        parts.append(f"{r.name} stopped reporting at {_at(r.last_t)}, "
                     f"{end - r.last_t:.0f} s before the window's end"
                     + (f" (Prometheus could not scrape it from {_at(down)})" if down else ""))
    return Finding(
        id="fleet.replica_gone", severity=Severity.WARNING,
        title=(f"replica {parts[0]}: its figures cover the time before" if len(parts) == 1
               else f"{len(parts)} replicas went away: {'; '.join(parts)}: their figures cover "
               "the time before"),
        evidence=[Evidence(f"{r.name} last sample", _at(r.last_t), "", facts.source)
                  for r in lost] + [Evidence("window's last sample", _at(end), "", facts.source)],
        why="The balancer's traffic moves to the remaining replicas, which queue more.",
        fix="Find out why it went away (its log, the host, the deployment).",
        reference=f"{REF}#fleet.replica_gone", layer="config", role="cause")


def router_share(facts: FleetFacts) -> Finding | None:
    """What the balancer costs: its own hop (GET /health through it against straight to the
    replicas) where probed, else everything between the client and the replicas' own TTFT."""
    router = facts.router
    if router is None or router.front_ttft_s <= 0:
        return None
    between = router.front_ttft_s - router.send_lag_s - router.replica_ttft_s
    if router.hop_s is not None:
        return _hop_finding(facts, router, between)
    share = between / router.front_ttft_s
    if share < ROUTER_INFO:
        return None
    try:
        impact = make_impact("ttft_mean", share, value_ms=between * 1000,
                             measured_at=facts.label)
    except ImpossibleShare:
        return None
    severity = min(severity_for_share(share), Severity.WARNING, key=lambda v: -v.rank)
    why = ("Between the client and the replicas' own TTFT (which starts when vLLM's API server "
           "has parsed the request): the balancer, the network both ways, and the replicas' "
           "HTTP frontends; not split here (no round-trip probe of the balancer).")
    return _router_finding(facts, router, severity, impact, why, role="symptom", title=(
        f"Between the client and the replicas: {between * 1000:.1f} ms of a "
        f"{router.front_ttft_s * 1000:.1f} ms mean TTFT ({share:.0%}): the balancer, the "
        "network and the replicas' HTTP frontends"))


def _hop_finding(facts: FleetFacts, router: RouterFacts, between: float) -> Finding | None:
    hop = router.hop_s or 0.0
    try:
        impact = make_impact("ttft_mean", hop / router.front_ttft_s, value_ms=hop * 1000,
                             measured_at=facts.label)
    except ImpossibleShare:
        return None
    share = impact["share"]
    rest = max(0.0, between - hop)
    title = (f"The balancer's hop: {hop * 1000:.1f} ms of a {router.front_ttft_s * 1000:.1f} ms "
             f"mean TTFT ({share:.0%}; GET /health p50 {_ms(router.front_rtt_s)} through it, "
             f"{_ms(router.direct_rtt_s)} straight to the replicas); the other "
             f"{rest * 1000:.1f} ms between the client and the replicas' own TTFT is their "
             "HTTP frontends and the client's receive path")
    why = ("The balancer's own processing, its queueing and its connections to the replicas, "
           "measured as the round trip it adds to the same request without a model behind it.")
    return _router_finding(facts, router, severity_for_share(share), impact, why, title=title)


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1000:.2f} ms"


def _router_finding(facts: FleetFacts, router: RouterFacts, severity: Severity,
                    impact: dict[str, Any], why: str, *, title: str,
                    role: str = "cause") -> Finding:
    if not router.reliable:
        severity = Severity.INFO
        why += f" Not blamed: the client's own timing is unreliable ({router.why_unreliable})."
    return Finding(
        id="fleet.router_share", severity=severity, title=f"{title} at {facts.label}",
        evidence=_router_evidence(router), why=why,
        fix=("Compare `latscope net` against the balancer and against one replica; check the "
             "balancer's buffering (proxy_buffering off for SSE), keep-alive to the upstreams "
             "and its own CPU."),
        reference=f"{REF}#fleet.router_share", layer="network", impact=impact, role=role)


def _router_evidence(router: RouterFacts) -> list[Evidence]:
    rtt = ([Evidence("GET /health p50 through the balancer", round(router.front_rtt_s * 1000, 3),
                     f"ms, {router.rtt_probes} keep-alive probes", "latscope.env.net.probe"),
            Evidence("GET /health p50 straight to the replicas",
                     round((router.direct_rtt_s or 0.0) * 1000, 3),
                     f"ms, {router.rtt_probes} keep-alive probes each", "latscope.env.net.probe")]
           if router.front_rtt_s is not None else [])
    return rtt + [Evidence("mean TTFT at the front", round(router.front_ttft_s * 1000, 2),
                     f"ms over {router.front_count} requests", router.source),
            Evidence("client send lag (taken off first)", round(router.send_lag_s * 1000, 2),
                     "ms", router.source),
            Evidence("replicas' own mean TTFT", round(router.replica_ttft_s * 1000, 2),
                     f"ms over {router.replica_count:g} requests",
                     "vllm:time_to_first_token_seconds _sum/_count, weighted by requests")]

