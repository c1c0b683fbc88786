"""A replica's facts over a window: reset-safe sums on a real restart, the scrape gap of a
replica gone, the arithmetic held to its reference (scipy's chi-square, Prometheus' own
increase() on the same data)."""

from __future__ import annotations

import numpy as np
import pytest

from latscope.fleet.facts import bootstrap_mean, chi2_sf, replica_facts, window_counter
from latscope.fleet.prometheus import PrometheusClient
from latscope.fleet.window import read_window


@pytest.mark.parametrize("x, df", [(13.8, 2), (3.2, 1), (7.5, 3), (0.5, 4), (25.0, 5),
                                   (1e-3, 1), (60.0, 7), (0.0, 2)])
def test_the_chi_square_tail_is_scipys(x, df):
    from scipy.stats import chi2

    assert chi2_sf(x, df) == pytest.approx(float(chi2.sf(x, df)), rel=1e-9, abs=1e-15)


def test_the_bootstrap_interval_holds_the_mean_and_is_the_same_every_time():
    rng = np.random.default_rng(3)
    counts = rng.poisson(3, 50).astype(float)
    sums = counts * rng.uniform(0.1, 0.3, 50)
    low, high = bootstrap_mean(sums, counts)
    mean = sums.sum() / counts.sum()
    assert low < mean < high and (low, high) == bootstrap_mean(sums, counts)
    assert bootstrap_mean(sums[:3], counts[:3]) == (None, None)  # too few steps to draw


def _replicas(recorded_prometheus, scenario):
    url, spec, replayer = recorded_prometheus(scenario)
    window = read_window(PrometheusClient(url), spec)
    assert replayer.misses == []
    return window, {r.name: replica_facts(r.name, r.labels, r.snapshots, up=r.up,
                                          starts=r.starts) for r in window.replicas}


def test_a_restart_counts_from_zero_and_loses_nothing_before_it(recorded_prometheus):
    window, facts = _replicas(recorded_prometheus, "restart")
    restarted = [f for f in facts.values() if f.resets or f.restarts]
    assert len(restarted) == 1
    r = restarted[0]
    assert r.down, "Prometheus could not scrape it while it restarted"
    snaps = next(w.snapshots for w in window.replicas if w.name == r.name)
    pairs = list(zip(snaps, snaps[1:]))
    # step by step: the counter's value before the restart plus its value at the end
    reset_at = next(i for i, (a, b) in enumerate(pairs)
                    if _total(b) < _total(a))
    expected = (_total(snaps[reset_at]) - _total(snaps[0])) + _total(snaps[-1])
    assert window_counter(pairs, "vllm:request_success_total") == expected
    # the naive first-to-last difference would have lost the requests before the restart
    assert expected > _total(snaps[-1]) - _total(snaps[0])


def _total(snapshot) -> float:
    return sum(s.value for s in snapshot.samples if s.name == "vllm:request_success_total")


def test_a_replica_gone_mid_window_ends_early_and_prometheus_says_it_was_down(
        recorded_prometheus):
    window, facts = _replicas(recorded_prometheus, "replica_gone")
    end = max(f.last_t for f in facts.values())
    gone = [f for f in facts.values() if end - f.last_t >= 2 * window.step]
    assert len(gone) == 1 and gone[0].down


@pytest.mark.slow  # renders report.html (vl-convert: 1-3 s)
def test_a_stopped_engine_core_is_a_stall_on_that_replica_only(recorded_prometheus, tmp_path):
    from latscope.campaign.fleet import PrometheusOptions, diagnose_prometheus

    # the recording stopped one replica's engine core (SIGSTOP) for 20 s under traffic: its API
    # server kept answering /metrics with the requests it held, and no token was computed
    window, facts = _replicas(recorded_prometheus, "stall")
    stalled = [f for f in facts.values() if f.stall_s > 0]
    assert len(stalled) == 1 and 14 <= stalled[0].stall_s <= 22
    url, spec, _ = recorded_prometheus("stall")
    report = diagnose_prometheus(PrometheusOptions(
        url, spec.start, spec.end, None, spec.selector, spec.replica_labels,
        output_dir=str(tmp_path / "run")), lambda line: None)
    found = {f["id"]: f for f in report["findings"]}
    assert found["fleet.replica_stall"]["title"].startswith(f"replica {stalled[0].name} stalled")
    assert "(the others did not)" in found["fleet.replica_stall"]["title"]
    # the stall is the verdict, with its requests' excess TTFT as its measured cost
    verdict = report["verdict"]
    assert verdict["finding_id"] == "fleet.replica_stall" and not verdict["healthy"]
    assert "of mean server TTFT is waiting on a stalled engine: replica" in verdict["text"]
