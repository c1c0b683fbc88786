"""Rules across the replicas of a fleet: which replica is slow and why, whether the balancer
spreads the load, and what sets one replica apart (its settings, a stall, preemptions, a
restart, a replica gone). Each rule reads ``fleet.model.FleetFacts`` and returns findings in the
one ``Finding`` form; ``findings.conclude`` calls ``fleet_findings`` when its inputs hold a
fleet, and the verdict is the one every conclusion has.

A replica is compared with the *median of the others* (for two replicas, the other one): a
fleet of identical replicas has no outlier, and one slow replica does not drag its own yardstick
up. A latency ratio is flagged only when its 95% interval (a bootstrap over the window's step
intervals, ``fleet.facts.ratio_to_median``) lies above ``RATIO_LOW`` and its point estimate at or
above ``RATIO``, on at least ``MIN_REQUESTS`` requests a replica. Thresholds: docs/findings.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from latscope.findings.fleetcause import cause_words, config_differences, load_ratio
from latscope.findings.impact import ImpossibleShare, make_impact, severity_for_share
from latscope.findings.verdict import HealthySplit
from latscope.fleet.facts import (
    LatencyFacts,
    ReplicaFacts,
    chi2_sf,
    ratio_to_median,
    upper_median,
)
from latscope.fleet.model import FleetFacts
from latscope.model import Evidence, Finding, Severity

REF = "docs/findings.md"
RATIO = 1.5  # a replica's mean latency at this multiple of the others' median is an outlier
RATIO_LOW = 1.2  # ... when the ratio's 95% interval starts above this (not a fluke)
MIN_REQUESTS = 10  # per replica, for a latency comparison
MIN_EXCESS_S = {"ttft": 0.02, "itl": 0.002}  # and at least this much slower, in seconds
LOAD_RATIO = 1.5  # a replica's request (or token) rate at this multiple of the others' median
LOAD_MIN_REQUESTS = 30  # in the whole fleet, for a load comparison
LOAD_P_VALUE = 0.001  # chi-square against rates proportional to each replica's time up
_METRICS = {"ttft": ("TTFT", "server_ttft_mean"), "itl": ("ITL", "tpot")}


def fleet_findings(facts: FleetFacts) -> list[Finding]:
    """Every fleet rule over one window (unranked)."""
    from latscope.findings.fleetstate import state_findings

    out: list[Finding] = []
    load = load_imbalance(facts)
    for metric in _METRICS:
        outliers = latency_outliers(facts, metric)
        if not outliers:
            continue
        found = _imbalance_finding(facts, metric, outliers, _compared(facts, metric))
        ratio = load_ratio(facts, outliers[0][0].name)
        if load is not None and metric == "ttft" and ratio is not None and ratio >= LOAD_RATIO:
            # the slow replica is the one the balancer sends more: the load is the cause
            load.impact, found.impact, found.role = found.impact, None, "symptom"
        out.append(found)
    if load is not None:
        out.append(load)
    out.extend(state_findings(facts))
    common = common_cause(facts)
    if common is not None and not any(f.id == "fleet.ttft_imbalance" for f in out):
        out.append(common)
    return out


def _compared(facts: FleetFacts, metric: str) -> list[tuple[ReplicaFacts, LatencyFacts]]:
    return [(r, lat) for r in facts.replicas if (lat := r.latency.get(metric)) is not None
            and lat.count >= MIN_REQUESTS and lat.mean is not None]


def latency_imbalance(facts: FleetFacts, metric: str) -> Finding | None:
    """Replicas whose mean TTFT (or ITL) stands out of the others' median, with the interval
    of the ratio; the cause is read from the slow replica's own figures and diagnosis."""
    outliers = latency_outliers(facts, metric)
    return _imbalance_finding(facts, metric, outliers, _compared(facts, metric)) \
        if outliers else None


def latency_outliers(facts: FleetFacts, metric: str) -> list[Any]:
    """(replica, its latency, ratio to the others' median, that median), slowest first."""
    compared = _compared(facts, metric)
    if len(compared) < 2:
        return []
    outliers = []
    for r, lat in compared:
        others = [o for x, o in compared if x.name != r.name]
        ratio = ratio_to_median(lat, others)
        median = float(upper_median(np.array([o.mean.value for o in others
                                              if o.mean is not None])))
        assert lat.mean is not None  # _compared keeps replicas with a mean
        if ratio is None or ratio.value < RATIO or lat.mean.value - median < MIN_EXCESS_S[metric]:
            continue
        if ratio.low is not None and ratio.low < RATIO_LOW:
            continue
        if ratio.low is None and not _buckets_apart(lat, others):
            continue
        outliers.append((r, lat, ratio, median))
    return sorted(outliers, key=lambda o: -o[2].value)


def _buckets_apart(lat: LatencyFacts, others: list[LatencyFacts]) -> bool:
    """Without an interval (few steps): the median's bucket lies above every other's."""
    highs = [o.p50.upper for o in others if o.p50 is not None]
    return lat.p50 is not None and bool(highs) and lat.p50.lower >= max(highs)


def _imbalance_finding(facts: FleetFacts, metric: str, outliers: list[Any],
                       compared: list[tuple[ReplicaFacts, LatencyFacts]]) -> Finding:
    name, target = _METRICS[metric]
    total = sum(lat.sum_s for _, lat in compared)
    excess = sum(lat.sum_s - lat.count * median for _, lat, _, median in outliers)
    try:
        impact: dict[str, Any] | None = make_impact(target, excess / total, value_ms=None,
                                                    measured_at=facts.label)
    except ImpossibleShare:
        impact = None
    top, lat, ratio, median = outliers[0]
    assert lat.mean is not None  # _compared keeps replicas with a mean
    others = "the other replica's" if len(compared) == 2 else "the others' median"
    head = (f"replica {top.name} has {ratio.value:.1f}x {others} {name} "
            f"({_s(lat.mean.value)} vs {_s(median)})")
    why_words, layer = cause_words(facts, top, metric)
    more = f"; also {', '.join(o[0].name for o in outliers[1:])}" if outliers[1:] else ""
    evidence = [_latency_evidence(r, lt, facts) for r, lt in compared]
    evidence += [Evidence(f"{r.name} / {others} mean {name}", round(rt.value, 2),
                          f"x, 95% interval {_interval(rt)}", "bootstrap over step intervals")
                 for r, _, rt, _ in outliers]
    severity = severity_for_share(impact["share"]) if impact else Severity.WARNING
    if severity.rank > Severity.WARNING.rank:  # an outlier this far out is never mere info
        severity = Severity.WARNING
    return _latency_finding(
        metric, severity=severity, title=f"{head}: {why_words}{more}", evidence=evidence,
        why=(f"Requests the balancer sends to {top.name} wait longer for their "
             f"{'first token' if metric == 'ttft' else 'tokens'} than on the other replicas: "
             "the fleet's mean and tail are set by its slowest member."),
        fix=(f"Give {top.name} the others' settings and capacity, or weight it down (or take "
             "it out) in the balancer until it is fixed; `latscope diagnose --url` against it "
             "alone measures its fix."),
        layer=layer, impact=impact, role="cause")


def _latency_finding(metric: str, **fields: Any) -> Finding:
    if metric == "ttft":
        return Finding(id="fleet.ttft_imbalance", reference=f"{REF}#fleet.ttft_imbalance",
                       **fields)
    return Finding(id="fleet.itl_imbalance", reference=f"{REF}#fleet.itl_imbalance", **fields)


def _latency_evidence(r: ReplicaFacts, lat: LatencyFacts, facts: FleetFacts) -> Evidence:
    assert lat.mean is not None
    p99 = (f", p99 {_s(lat.p99.value)} in [{_s(lat.p99.lower)}, {_s(lat.p99.upper)}]"
           if lat.p99 is not None and not lat.p99.above_top_bucket else "")
    return Evidence(f"{r.name} mean {lat.metric}", round(lat.mean.value * 1000, 1),
                    f"ms, 95% interval {_interval(lat.mean, seconds=True)}, {lat.count:g} "
                    f"requests{p99}", f"{lat.family} _sum/_count over {facts.label} "
                    f"({facts.source})")


def _interval(e: Any, seconds: bool = False) -> str:
    if e.low is None or e.high is None:
        return "not drawn (too few step intervals)"
    if seconds:
        return f"[{_s(e.low)}, {_s(e.high)}]"
    return f"[{e.low:.3g}, {e.high:.3g}]"


def _s(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def load_imbalance(facts: FleetFacts) -> Finding | None:
    """The balancer sends some replicas more requests (or tokens) than others, beyond what
    chance gives: a chi-square of the requests each replica finished against shares
    proportional to the time it was up."""
    rows = [(r, r.finished) for r in facts.replicas if r.finished is not None and r.up_s > 0]
    total = sum(n for _, n in rows if n is not None)
    if len(rows) < 2 or total < LOAD_MIN_REQUESTS:
        return None
    spans = np.array([r.up_s for r, _ in rows])
    observed = np.array([n for _, n in rows], dtype=float)
    expected = spans / spans.sum() * observed.sum()
    p_value = chi2_sf(float(((observed - expected) ** 2 / expected).sum()), len(rows) - 1)
    rates = {r.name: n / r.up_s for r, n in rows if n is not None}
    busiest = max(rates, key=lambda k: rates[k])
    ratio = load_ratio(facts, busiest)
    if ratio is None or ratio < LOAD_RATIO or p_value >= LOAD_P_VALUE:
        return None
    quietest = min(rates, key=lambda k: rates[k])
    evidence = [Evidence(f"{r.name} requests finished", n, f"in {r.up_s:.0f} s up "
                         f"({rates[r.name]:.2f}/s)", f"vllm:request_success_total, {facts.source}")
                for r, n in rows]
    evidence += [Evidence(f"{r.name} in flight (Little's law)",
                          None if r.mean_running is None else round(r.mean_running, 2),
                          f"running, {_opt(r.mean_waiting)} waiting, KV mean {_pct(r.kv_mean)}",
                          "request_inference_time / request_queue_time _sum over the window")
                 for r, _ in rows]
    evidence.append(Evidence("chi-square p-value (equal rates per time up)", round(p_value, 6),
                             "", "Pearson's chi-square, latscope.fleet.facts.chi2_sf"))
    return Finding(
        id="fleet.load_imbalance", severity=Severity.WARNING if ratio >= 2 else Severity.INFO,
        title=(f"The balancer sends replica {busiest} {ratio:.1f}x the others' median request "
               f"rate ({rates[busiest]:.2f}/s; {quietest} gets {rates[quietest]:.2f}/s)"),
        evidence=evidence,
        why="A replica given more requests than its share queues first; the others idle.",
        fix=("Check the balancer's policy and weights (round robin, least-connections, "
             "session affinity, a health check that takes replicas out); spread the load."),
        reference=f"{REF}#fleet.load_imbalance", layer="queue", role="cause")


def _opt(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.0%}"


def common_cause(facts: FleetFacts) -> Finding | None:
    """Every replica's own diagnosis names the same cause: the fleet's cause, with its share of
    the fleet's TTFT (each replica's share weighted by its TTFT)."""
    tops = []
    for r in facts.replicas:
        c = facts.conclusions.get(r.name)
        lat = r.latency.get("ttft")
        top = next((f for f in c.ranked if f.role == "cause" and f.severity.rank <= 1
                    and (f.impact or {}).get("share") is not None), None) if c else None
        tops.append((r, lat, top))
    found = [(r, lat, f) for r, lat, f in tops if f is not None and lat is not None]
    if len(found) < 2 or len(found) < len(facts.replicas) or len({f.id for *_, f in found}) > 1:
        return None
    weight = sum(lat.sum_s for _, lat, _ in found)
    if weight <= 0:
        return None
    share = sum((f.impact or {})["share"] * lat.sum_s for _, lat, f in found) / weight
    first = found[0][2]
    impact = make_impact("server_ttft_mean", share, measured_at=facts.label)
    return Finding(
        id="fleet.common_cause", severity=severity_for_share(share), layer=first.layer,
        title=f"Every replica ({len(found)}): {first.title}",
        evidence=[Evidence(f"{r.name}: {f.id}", f.title, f"{(f.impact or {})['share']:.0%} of "
                           "its TTFT", "its own diagnosis of the window") for r, _, f in found],
        why=first.why, fix=first.fix, reference=f"{REF}#fleet.common_cause", impact=impact,
        role="cause")


def fleet_healthy(facts: FleetFacts) -> HealthySplit | None:
    """What a clean verdict reports: the fleet's rate, mean TTFT and where it goes."""
    ttft = [lat for r in facts.replicas if (lat := r.latency.get("ttft")) and lat.count > 0]
    count = sum(lat.count for lat in ttft)
    if not count:
        return None
    span = max((r.span_s for r in facts.replicas), default=0.0)
    queue = sum(lat.sum_s for r in facts.replicas if (lat := r.latency.get("queue")))
    prefill = sum(lat.sum_s for r in facts.replicas if (lat := r.latency.get("prefill")))
    total = sum(lat.sum_s for lat in ttft)
    split = (f"queue {queue / total:.0%}, prefill {prefill / total:.0%} of the replicas' TTFT; "
             f"{len(facts.replicas)} replicas, none standing out" if total > 0 else "")
    return HealthySplit(facts.label, total / count * 1000, split,
                        count / span if span > 0 else 0.0)


__all__ = ["common_cause", "config_differences", "fleet_findings", "fleet_healthy",
           "latency_imbalance", "load_imbalance"]
