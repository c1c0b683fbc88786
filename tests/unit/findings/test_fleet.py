"""The fleet's rules on facts whose truth is known by construction: where the thresholds lie,
what a verdict names, and that alike replicas give no imbalance (the recorded real fleets are in
tests/unit/fleet/test_fleet_window.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from latscope.findings.conclude import conclude
from latscope.findings.fleet import fleet_findings
from latscope.findings.inputs import ConclusionInputs
from latscope.fleet.facts import Estimate, LatencyFacts, ReplicaFacts, bootstrap_mean
from latscope.fleet.model import FleetFacts, ReplicaConclusion, RouterFacts
from latscope.model import Evidence, Finding, Severity
from latscope.results import Verdict
from latscope.server.metrics import QuantileEstimate

LABEL = "the window 2026-12-06 01:00:00-01:01:00 UTC"
STEPS = 60


def lat(metric: str, mean_s: float, per_step: float = 2.0, spread: float = 0.1,
        seed: int = 0) -> LatencyFacts:
    """A histogram whose step intervals each saw ``per_step`` requests of mean ``mean_s``,
    the interval means spread by ``spread`` (relative)."""
    rng = np.random.default_rng(seed)
    counts = np.full(STEPS, per_step)
    sums = counts * mean_s * np.clip(1 + spread * rng.standard_normal(STEPS), 0.05, None)
    low, high = bootstrap_mean(sums, counts)
    mean = float(sums.sum() / counts.sum())
    q = QuantileEstimate(0.5, mean, mean * 0.5, mean * 2)
    return LatencyFacts(metric, f"vllm:{metric}", float(counts.sum()), float(sums.sum()),
                        Estimate(mean, low, high), q, QuantileEstimate(0.99, mean * 2, mean,
                                                                       mean * 4),
                        tuple(sums), tuple(counts))


def replica(name: str, ttft_s: float = 0.2, queue_s: float = 0.01, prefill_s: float = 0.1,
            itl_s: float = 0.02, finished: float = 120, seed: int = 0, **extra) -> ReplicaFacts:
    latency = {"ttft": lat("ttft", ttft_s, seed=seed), "queue": lat("queue", queue_s, seed=seed),
               "prefill": lat("prefill", prefill_s, seed=seed),
               "itl": lat("itl", itl_s, per_step=40, seed=seed)}
    base = ReplicaFacts(name, {"instance": name}, 1000.0, 1000.0 + STEPS, STEPS, True,
                        latency=latency, finished=finished, preemptions=0, running_peak=6,
                        waiting_peak=0, running_peak_queued=None, mean_running=2.0,
                        mean_waiting=0.0, kv_mean=0.05, kv_peak=0.1,
                        config={"vllm:cache_config_info": {"block_size": "128"}})
    return dataclasses.replace(base, **extra)


def fleet(*replicas: ReplicaFacts, router: RouterFacts | None = None,
          conclusions: dict | None = None) -> FleetFacts:
    return FleetFacts(LABEL, tuple(replicas), conclusions or {}, router, 1.0, "test facts")


def conclude_fleet(facts: FleetFacts):
    """The seam every conclusion goes through, with a fleet's facts."""
    c = conclude(ConclusionInputs(kind="fleet", fleet=facts))
    return c.ranked, c.verdict.to_dict(), c.notes


def ids(findings: list[Finding]) -> set[str]:
    return {f.id for f in findings}


def test_alike_replicas_get_no_fleet_finding_and_a_healthy_verdict():
    facts = fleet(*(replica(f"10.0.0.{i}:8000", seed=i) for i in range(1, 4)))
    assert fleet_findings(facts) == []
    ranked, verdict, _ = conclude_fleet(facts)
    assert ranked == [] and verdict["kind"] == "healthy" and verdict["healthy"]
    assert "3 replicas, none standing out" in verdict["text"]


def test_a_replica_queueing_behind_its_cap_is_named_with_its_cause():
    slow = replica("10.0.3.7:8000", ttft_s=0.62, queue_s=0.57, running_peak=1,
                   running_peak_queued=1, waiting_peak=14, mean_waiting=3.0, seed=9)
    facts = fleet(replica("10.0.3.5:8000", seed=1), replica("10.0.3.6:8000", seed=2), slow)
    found = {f.id: f for f in fleet_findings(facts)}
    assert set(found) == {"fleet.ttft_imbalance"}
    f = found["fleet.ttft_imbalance"]
    # the yardstick is the others' upper median: the slower of the two (202 ms)
    assert f.title.startswith("replica 10.0.3.7:8000 has 3.0x the others' median TTFT "
                              "(614 ms vs 202 ms)")
    assert "92% of its TTFT is queueing (the others' 5%), behind its batch cap (max_num_seqs): " \
        "Running never " \
        "above 1 while up to 14 waited; the others ran up to 6 at once" in f.title
    assert f.layer == "queue" and f.role == "cause" and f.severity == Severity.WARNING
    # the slow replica's excess TTFT over the fleet's summed TTFT: (0.62 - 0.2) / (0.2*2 + 0.62)
    assert f.impact["share"] == pytest.approx(0.42 / 1.02, abs=0.03)
    ranked, verdict, _ = conclude_fleet(facts)
    assert verdict["finding_id"] == "fleet.ttft_imbalance" and not verdict["healthy"]
    assert "10.0.3.7:8000" in verdict["text"] and "queueing" in verdict["text"]


def bursty(mean_s: float, base_s: float, bursts: int = 3) -> LatencyFacts:
    """Every step at ``base_s`` but a few bursts that lift the window's mean to ``mean_s``."""
    counts = np.full(STEPS, 2.0)
    sums = counts * base_s
    sums[[10, 30, 50][:bursts]] += (mean_s - base_s) * counts.sum() / bursts
    low, high = bootstrap_mean(sums, counts)
    mean = float(sums.sum() / counts.sum())
    return LatencyFacts("ttft", "vllm:ttft", float(counts.sum()), float(sums.sum()),
                        Estimate(mean, low, high), None, None, tuple(sums), tuple(counts))


def test_a_ratio_whose_interval_reaches_down_to_alike_is_no_finding():
    from latscope.fleet.facts import ratio_to_median

    # 1.6x over the window, all of it in three steps: the interval reaches down to 1x
    noisy = replica("b:1")
    noisy = dataclasses.replace(noisy, latency={**noisy.latency, "ttft": bursty(0.32, 0.2)})
    a = replica("a:1", seed=1)
    ratio = ratio_to_median(noisy.latency["ttft"], [a.latency["ttft"]])
    assert ratio.value == pytest.approx(1.6, abs=0.05) and ratio.low < 1.2
    assert "fleet.ttft_imbalance" not in ids(fleet_findings(fleet(a, noisy)))


def test_the_part_that_grew_is_named_even_below_half_of_ttft():
    # queue 45% of its TTFT, prefill 40%: the queue is what grew against the others
    slow = replica("c:1", ttft_s=0.31, queue_s=0.14, prefill_s=0.125, running_peak=1,
                   running_peak_queued=1, waiting_peak=2, seed=3)
    f = next(f for f in fleet_findings(fleet(replica("a:1", seed=1), replica("b:1", seed=2),
                                             slow)) if f.id == "fleet.ttft_imbalance")
    assert "45% of its TTFT is queueing (the others' 5%), behind its batch cap" in f.title
    assert f.layer == "queue"


def test_two_replicas_compare_with_the_other_one():
    facts = fleet(replica("a:1", seed=1), replica("b:1", ttft_s=0.9, queue_s=0.1,
                                                 prefill_s=0.75, seed=2))
    f = next(f for f in fleet_findings(facts) if f.id == "fleet.ttft_imbalance")
    assert "the other replica's TTFT" in f.title
    assert "83% of its TTFT is prefill (the others' 50%)" in f.title
    assert f.layer == "prefill"


def test_too_few_requests_are_not_compared():
    few = replica("b:1", ttft_s=2.0, queue_s=1.8, finished=5)
    few = dataclasses.replace(few, latency={**few.latency, "ttft": dataclasses.replace(
        few.latency["ttft"], count=5.0)})
    assert "fleet.ttft_imbalance" not in ids(fleet_findings(fleet(replica("a:1"), few)))


def test_the_balancer_sending_one_replica_more_is_the_cause_of_its_latency():
    busy = replica("c:1", ttft_s=0.8, queue_s=0.6, finished=480, seed=3)
    facts = fleet(replica("a:1", seed=1), replica("b:1", seed=2), busy)
    found = {f.id: f for f in fleet_findings(facts)}
    load, slow = found["fleet.load_imbalance"], found["fleet.ttft_imbalance"]
    assert load.title.startswith("The balancer sends replica c:1 4.0x the others' median")
    assert load.impact is not None and load.role == "cause"
    assert slow.role == "symptom" and slow.impact is None
    assert "it finished 4.0x the others' median request rate" in slow.title
    _, verdict, _ = conclude_fleet(facts)
    assert verdict["finding_id"] == "fleet.load_imbalance"


def test_round_robin_counts_are_no_load_imbalance():
    facts = fleet(replica("a:1", finished=118), replica("b:1", finished=121),
                  replica("c:1", finished=120))
    assert "fleet.load_imbalance" not in ids(fleet_findings(facts))


def test_other_settings_stall_and_preemptions_on_one_replica_are_named():
    odd = replica("c:1", config={"vllm:cache_config_info": {"block_size": "16"}},
                  stall_s=30.0, stall_at=1010.0, preemptions=12, kv_peak=1.0)
    found = {f.id: f for f in fleet_findings(fleet(replica("a:1"), replica("b:1"), odd))}
    assert found["fleet.config_mismatch"].title == (
        "Replicas run different settings: block_size (block_size=16 on c:1)")
    assert found["fleet.replica_stall"].title.startswith(
        "replica c:1 stalled for 30 s from 00:16:50 UTC")
    assert "(the others did not)" in found["fleet.replica_stall"].title
    assert found["fleet.replica_preemptions"].title.startswith(
        "replica c:1 preempted 12 times (0.10 per request; the others 0.00)")


def test_a_replica_gone_and_one_restarted_are_told_apart():
    gone = replica("c:1", last_t=1000.0 + 30, down=((1031.0, 1060.0),))
    restarted = replica("b:1", resets=(1020.0,))
    found = {f.id: f for f in fleet_findings(fleet(replica("a:1"), restarted, gone))}
    assert found["fleet.replica_gone"].title.startswith(
        "replica c:1 stopped reporting at 00:17:10 UTC, 30 s before the window's end "
        "(Prometheus could not scrape it from 00:17:11 UTC)")
    assert found["fleet.replica_restarted"].severity == Severity.INFO
    assert "b:1" in found["fleet.replica_restarted"].title


def test_the_router_share_is_the_front_less_the_replicas_and_never_blamed_on_a_late_client():
    router = RouterFacts("latscope's client through http://lb", front_ttft_s=0.5,
                         front_count=100, replica_ttft_s=0.28, replica_count=100,
                         send_lag_s=0.02)
    f = next(f for f in fleet_findings(fleet(replica("a:1"), replica("b:1"), router=router))
             if f.id == "fleet.router_share")
    # not probed: the balancer, the network and the replicas' frontends, not split
    assert f.title.startswith("Between the client and the replicas: 200.0 ms of a 500.0 ms "
                              "mean TTFT (40%): the balancer, the network and the replicas' "
                              "HTTP frontends")
    assert f.severity == Severity.WARNING and f.role == "symptom"
    assert f.impact["share"] == pytest.approx(0.4)
    late = dataclasses.replace(router, reliable=False, why_unreliable="event-loop lag")
    f = next(f for f in fleet_findings(fleet(replica("a:1"), replica("b:1"), router=late))
             if f.id == "fleet.router_share")
    assert f.severity == Severity.INFO and "Not blamed" in f.why
    close = dataclasses.replace(router, replica_ttft_s=0.47)
    assert "fleet.router_share" not in ids(fleet_findings(fleet(replica("a:1"), router=close)))


def test_the_balancers_own_hop_is_its_round_trip_less_the_replicas():
    probed = RouterFacts("latscope's client through http://lb", front_ttft_s=0.2,
                         front_count=100, replica_ttft_s=0.15, replica_count=100,
                         hop_s=0.0004, front_rtt_s=0.0011, direct_rtt_s=0.0007, rtt_probes=20)
    f = next(f for f in fleet_findings(fleet(replica("a:1"), replica("b:1"), router=probed))
             if f.id == "fleet.router_share")
    assert f.title.startswith("The balancer's hop: 0.4 ms of a 200.0 ms mean TTFT (0%; GET "
                              "/health p50 1.10 ms through it, 0.70 ms straight to the "
                              "replicas); the other 49.6 ms between the client and the "
                              "replicas' own TTFT is their HTTP frontends")
    assert f.severity == Severity.INFO and f.role == "cause"
    slow = dataclasses.replace(probed, hop_s=0.06, front_rtt_s=0.0607)
    f = next(f for f in fleet_findings(fleet(replica("a:1"), replica("b:1"), router=slow))
             if f.id == "fleet.router_share")
    assert f.severity == Severity.WARNING and f.impact["share"] == pytest.approx(0.3)
    _, verdict, _ = conclude_fleet(fleet(replica("a:1"), replica("b:1"), router=slow))
    assert verdict["finding_id"] == "fleet.router_share"
    assert "30% of mean TTFT is the network: The balancer's hop: 60.0 ms" in verdict["text"]


def test_every_replica_with_the_same_cause_is_the_fleets_cause():
    def concl(name: str, share: float) -> ReplicaConclusion:
        cause = Finding("server.queue_max_num_seqs", Severity.WARNING,
                        "Requests queue because the batch is full: Running 2 = max_num_seqs 2",
                        [Evidence("x", 1)], layer="queue", role="cause",
                        impact={"target": "ttft_mean", "share": share})
        return ReplicaConclusion(name, (cause,), Verdict(text="", finding_id=cause.id,
                                                         healthy=False))

    facts = fleet(replica("a:1", seed=1), replica("b:1", seed=2),
                  conclusions={"a:1": concl("a:1", 0.8), "b:1": concl("b:1", 0.6)})
    found = {f.id: f for f in fleet_findings(facts)}
    common = found["fleet.common_cause"]
    assert common.title.startswith("Every replica (2): Requests queue because the batch is full")
    assert common.impact["share"] == pytest.approx(0.7, abs=0.02)
    _, verdict, _ = conclude_fleet(facts)
    assert verdict["finding_id"] == "fleet.common_cause"
