"""report.json of a fleet diagnosis (``report.fleetmodel.FleetReport``) from its facts and its
conclusion: a row per replica, the router's part, Prometheus' figures set beside latscope's own
bucket arithmetic on the same window, and one time series per replica."""

from __future__ import annotations

import math
import time

from latscope.fleet.facts import LatencyFacts, ReplicaFacts
from latscope.fleet.model import FleetFacts, RouterFacts
from latscope.fleet.window import FleetWindow, PromqlFigure
from latscope.model import Finding, Severity
from latscope.report.fleetmodel import (
    FleetReport,
    FleetSource,
    PromqlCheck,
    ReplicaRow,
    ReplicaSeries,
    RouterRow,
)
from latscope.results import FindingEntry, Verdict, section
from latscope.rundir import RunDir
from latscope.server.metrics import QuantileEstimate

# Prometheus' increase() extrapolates to the window's edges and reads the samples inside
# (end - window, end]; latscope takes the value at each step. Figures this close agree.
AGREE_REL = 0.05


def window_label(start: float, end: float) -> str:
    def at(t: float) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(t))

    day = time.strftime("%Y-%m-%d", time.gmtime(start))
    return f"the window {day} {at(start)}-{at(end)} UTC"


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def build_fleet_report(run: RunDir, facts: FleetFacts, ranked: list[Finding],
                       verdict: Verdict, *, window: FleetWindow | None,
                       balancer: str | None, notes: list[str], elapsed_s: float) -> dict:
    from latscope import __version__

    promql = promql_checks(facts, window.promql) if window is not None else []
    disagree = [c for c in promql if c.agree is False]
    if disagree:
        notes = [*notes, f"Prometheus and latscope disagree on {len(disagree)} of {len(promql)} "
                 "figures (table 'Prometheus beside latscope'): " + "; ".join(
                     f"{c.replica} {c.metric} {c.what}: {c.note}" for c in disagree[:3])]
    return FleetReport(
        schema_version=1, kind="fleet", latscope_version=__version__,
        created=_iso(time.time()), command=run.manifest.get("command"),
        source=_source(facts, window, balancer), verdict=verdict,
        findings=[section(f.to_dict(), FindingEntry) for f in ranked],
        replicas=[replica_row(r, facts) for r in facts.replicas],
        router=_router_row(facts.router), promql=promql, timeseries=timeseries(facts),
        notes=notes, elapsed_s=round(elapsed_s, 2), run_dir=str(run.path)).to_dict()


def _source(facts: FleetFacts, window: FleetWindow | None, balancer: str | None) -> FleetSource:
    if window is not None:
        spec = window.spec
        return FleetSource(kind="prometheus", prometheus=window.prometheus,
                           selector=spec.selector, replica_labels=list(spec.replica_labels),
                           balancer=balancer, start=_iso(spec.start), end=_iso(spec.end),
                           window_s=round(spec.end - spec.start, 3), step_s=window.step,
                           scrape_interval_s=window.scrape_interval_s)
    firsts = [r.first_t for r in facts.replicas if r.first_t is not None] or [time.time()]
    lasts = [r.last_t for r in facts.replicas if r.last_t is not None] or [time.time()]
    return FleetSource(kind="active", prometheus=None, selector="", replica_labels=["url"],
                       balancer=balancer, start=_iso(min(firsts)), end=_iso(max(lasts)),
                       window_s=round(max(lasts) - min(firsts), 3),
                       step_s=round(facts.step_s, 3), scrape_interval_s=round(facts.step_s, 3))


def _ms(lat: LatencyFacts | None, attr: str = "mean") -> float | None:
    if lat is None:
        return None
    value = getattr(lat, attr)
    if value is None:
        return None
    v = value.value
    return None if math.isinf(getattr(value, "upper", 0.0)) else round(v * 1000, 3)


def _ci(lat: LatencyFacts | None) -> list[float] | None:
    if lat is None or lat.mean is None or lat.mean.low is None or lat.mean.high is None:
        return None
    return [round(lat.mean.low * 1000, 3), round(lat.mean.high * 1000, 3)]


def _status(r: ReplicaFacts, facts: FleetFacts) -> str:
    end = max((x.last_t for x in facts.replicas if x.last_t is not None), default=None)
    if not r.vllm:
        return "no vllm series"
    if end is not None and r.last_t is not None and end - r.last_t >= 2 * max(facts.step_s, 1):
        return "gone"  # when: fleet.replica_gone
    if r.resets or r.restarts:
        return "restarted"
    return "up"


def replica_row(r: ReplicaFacts, facts: FleetFacts) -> ReplicaRow:
    c = facts.conclusions.get(r.name)
    lat = r.latency
    ttft, queue = lat.get("ttft"), lat.get("queue")
    p99 = ttft.p99 if ttft is not None else None
    bucket = ([round(p99.lower * 1000, 3), None if math.isinf(p99.upper)
               else round(p99.upper * 1000, 3)] if p99 is not None else None)
    acting = [section(f.to_dict(), FindingEntry) for f in (c.ranked if c else ())
              if f.severity in (Severity.CRITICAL, Severity.WARNING)]
    return ReplicaRow(
        name=r.name, labels=r.labels, status=_status(r, facts),
        verdict=c.verdict.text if c else "", verdict_finding=c.verdict.finding_id if c else None,
        requests=r.finished, rate_per_s=_round(r.rate(r.finished)),
        ttft_mean_ms=_ms(ttft), ttft_ci_ms=_ci(ttft), ttft_p50_ms=_ms(ttft, "p50"),
        ttft_p99_ms=_ms(ttft, "p99"), ttft_p99_bucket_ms=bucket, queue_mean_ms=_ms(queue),
        queue_share=(round(queue.sum_s / ttft.sum_s, 4) if queue and ttft and ttft.sum_s
                     else None),
        prefill_mean_ms=_ms(lat.get("prefill")), itl_mean_ms=_ms(lat.get("itl")),
        itl_ci_ms=_ci(lat.get("itl")), e2e_mean_ms=_ms(lat.get("e2e")),
        mean_running=_round(r.mean_running), mean_waiting=_round(r.mean_waiting),
        running_peak=r.running_peak, waiting_peak=r.waiting_peak, kv_mean=_round(r.kv_mean),
        kv_peak=r.kv_peak, preemptions=r.preemptions, stall_s=round(r.stall_s, 2),
        findings=acting)


def _round(v: float | None, digits: int = 4) -> float | None:
    return None if v is None else round(v, digits)


def _router_row(router: RouterFacts | None) -> RouterRow | None:
    if router is None:
        return None
    part = router.front_ttft_s - router.send_lag_s - router.replica_ttft_s
    notes = []
    if abs(router.replica_count - router.front_count) > 0:
        notes.append(f"the replicas counted {router.replica_count:g} first tokens in the run, "
                     f"the client {router.front_count}: other traffic, or requests cut at the "
                     "run's end")
    if part < 0:  # the replicas' own TTFT cannot exceed the client's: never printed as a time
        notes.append(f"the replicas' mean TTFT ({router.replica_ttft_s * 1000:.1f} ms) exceeds "
                     f"the client's ({router.front_ttft_s * 1000:.1f} ms): the two do not "
                     "describe the same requests; no balancer time is derived")
    ok = part >= 0 and router.front_ttft_s > 0
    return RouterRow(
        source=router.source, front_ttft_ms=round(router.front_ttft_s * 1000, 3),
        front_count=router.front_count, send_lag_ms=round(router.send_lag_s * 1000, 3),
        replica_ttft_ms=round(router.replica_ttft_s * 1000, 3),
        replica_count=router.replica_count, router_ms=round(part * 1000, 3) if ok else None,
        share=round(part / router.front_ttft_s, 4) if ok else None, note="; ".join(notes),
        reliable=router.reliable, why_unreliable=router.why_unreliable,
        hop_ms=_ms_of(router.hop_s), front_rtt_ms=_ms_of(router.front_rtt_s),
        direct_rtt_ms=_ms_of(router.direct_rtt_s))


def _ms_of(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def promql_checks(facts: FleetFacts, figures: list[PromqlFigure]) -> list[PromqlCheck]:
    """Prometheus' count, mean and quantiles beside latscope's, replica by replica."""
    by = {(f.replica, f.metric, f.what): f.value for f in figures}
    out = []
    for r in facts.replicas:
        for metric in ("ttft", "queue", "itl"):
            lat = r.latency.get(metric)
            if lat is None:
                continue
            count, total = by.get((r.name, metric, "count")), by.get((r.name, metric, "sum"))
            prom_mean = total / count if count and total is not None and count > 0 else None
            out.append(_check(r.name, metric, "count", count, lat.count, None))
            out.append(_check(r.name, metric, "mean", prom_mean,
                              lat.mean.value if lat.mean else None, None))
            for q, est in (("p50", lat.p50), ("p99", lat.p99)):
                out.append(_check(r.name, metric, q, by.get((r.name, metric, q)),
                                  est.value if est else None, est))
    return out


def _check(replica: str, metric: str, what: str, promql: float | None, ours: float | None,
           bucket: QuantileEstimate | None) -> PromqlCheck:
    agree: bool | None = None
    note = ""
    if promql is None or ours is None or (isinstance(promql, float) and math.isnan(promql)):
        note = "not computed by " + ("Prometheus" if promql is None or promql != promql
                                     else "latscope")
    elif math.isinf(promql) or (bucket is not None and math.isinf(bucket.upper)):
        agree = math.isinf(promql) and bucket is not None and math.isinf(bucket.upper)
        note = "above the top finite bucket"
    else:
        scale = max(abs(promql), abs(ours), 1e-12)
        agree = abs(promql - ours) <= AGREE_REL * scale
        if bucket is not None and not agree and bucket.lower <= promql <= bucket.upper:
            agree, note = True, "same bucket"
        elif not agree:
            note = (f"Prometheus {promql:.4g} vs latscope {ours:.4g}"
                    + (" (increase() extrapolates counts to the window's edges)"
                       if what == "count" else ""))
    return PromqlCheck(replica=replica, metric=metric, what=what,
                       promql=None if promql is None or promql != promql or math.isinf(promql)
                       else round(promql, 6), latscope=None if ours is None else round(ours, 6),
                       agree=agree, note=note)


def timeseries(facts: FleetFacts) -> list[ReplicaSeries]:
    starts = [r.first_t for r in facts.replicas if r.first_t is not None]
    origin = min(starts) if starts else 0.0

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 3)

    return [ReplicaSeries(name=r.name, t_s=[round(p.t - origin, 3) for p in r.timeline],
                          requests_per_s=[_round(p.requests_per_s) for p in r.timeline],
                          ttft_mean_ms=[ms(p.ttft_mean_s) for p in r.timeline],
                          queue_mean_ms=[ms(p.queue_mean_s) for p in r.timeline],
                          running=[p.running for p in r.timeline],
                          waiting=[p.waiting for p in r.timeline],
                          kv_usage=[p.kv_usage for p in r.timeline]) for r in facts.replicas]
