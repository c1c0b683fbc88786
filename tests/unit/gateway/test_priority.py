"""campaign.priority: when the A/B of --scheduling-policy priority + tags fits (pure), how its
outcome is worded from the intervals, and how the experiment names and sizes its B arm."""

from __future__ import annotations

import pytest

from latscope.campaign.experiment import Experiment, higher_is_better
from latscope.campaign.priority import priority_fits, priority_proposal
from latscope.results import ABResult, section
from latscope.errors import ConfigError
from latscope.gateway.fits import RunShape

SPREAD = [40] * 90 + [768] * 10  # the 90/10 mix of the CPU case: CV ~2
EVEN = list(range(64, 257))  # uniform 64..256: CV ~0.3


def test_it_fits_where_queueing_dominates_sizes_spread_and_latscope_controls_the_server():
    fit = priority_fits(0.8, SPREAD, controlled=True, server_policy="fcfs")
    assert fit.propose and fit.measure
    assert "--scheduling-policy priority" in fit.reason and "80%" in fit.reason


def test_without_control_it_is_proposed_not_measured():
    fit = priority_fits(0.8, SPREAD, controlled=False)
    assert fit.propose and not fit.measure
    assert "proposed, not measured" in fit.reason


@pytest.mark.parametrize("share, sizes", [(0.3, SPREAD), (0.9, EVEN)])
def test_it_does_not_fit_without_a_queue_or_without_a_spread(share, sizes):
    fit = priority_fits(share, sizes, controlled=True)
    assert not fit.propose and not fit.measure


def test_impossible_shares_are_refused():
    with pytest.raises(ConfigError):
        priority_fits(1.3, SPREAD, controlled=True)


def _guard(metric: str, verdict: str) -> dict:
    return {"metric": metric, "a_values": [], "b_values": [], "change_pct": None,
            "ci95_pct": None, "verdict": verdict}


def outcome_of(exp: dict) -> str:
    """The one wording of an A/B's result (``results.ABResult.words``), over an A/B's dict."""
    base = {"finding_id": "f", "change": "c", "metric": "short_ttft_mean_ms", "load": 8,
            "arms": [], "a_values": [], "b_values": [], "a_mean": None, "b_mean": None,
            "change_pct": None, "ci95_pct": None, "helped": exp["verdict"] == "better",
            "warmup_excluded": True, "prefix_cache_hit_rate": {}, "run_dirs": [], "note": ""}
    return section({**base, **exp}, ABResult).words()


@pytest.mark.parametrize("verdict, guards, words", [
    ("better", [_guard("long_e2e_mean_ms", "no significant difference"),
                _guard("steady_rps", "better")], "helped"),
    ("better", [_guard("long_e2e_mean_ms", "worse"), _guard("steady_rps", "worse")],
     "helped, at a cost (long_e2e_mean_ms, steady_rps worse)"),
    ("no significant difference", [_guard("long_e2e_mean_ms", "better")],
     "did not measurably help"),
    ("worse", [], "made it worse"),
])
def test_the_outcome_is_the_intervals_in_words(verdict, guards, words):
    assert outcome_of({"verdict": verdict, "guards": guards}) == words


def test_the_b_arm_is_a_relaunch_behind_the_tagging_gateway_sized_to_the_aging_horizon():
    shape = RunShape(requests=120, warmup=24, horizon_s=7.0, horizon_requests=24)
    p = priority_proposal("server.queue_max_num_seqs", "why", shape)
    assert p.relaunches_with_gateway
    assert p.describe() == "--scheduling-policy priority + latscope gateway --policy tag"
    p.gateway["tokenizer"] = "/some/dir"  # a run's own path is not part of the change shown
    assert "/some/dir" not in p.describe()
    assert (p.requests, p.warmup) == (120, 24) and "the tags may" in p.note
    assert p.metric == "short_ttft_mean_ms" and p.guard == "long_e2e_mean_ms"
    assert p.more_guards == ("steady_rps",)


def test_every_guard_gets_its_own_interval_with_its_own_direction():
    exp = Experiment(priority_proposal("f", "why"), load=8)
    exp.a_values, exp.b_values = [100.0, 110.0, 90.0], [60.0, 70.0, 50.0]
    exp.guard_values = {"A": [1000.0, 1100.0, 900.0], "B": [1500.0, 1700.0, 1400.0]}
    exp.more_guard_values = {"steady_rps": {"A": [4.0, 4.4, 3.6], "B": [4.1, 4.3, 3.7]}}
    from latscope.analysis.tune import paired_change
    exp.result = paired_change(exp.a_values, exp.b_values, higher_better=False)
    out = exp.ab_result().to_dict()
    guards = {g["metric"]: g for g in out["guards"]}
    assert guards["long_e2e_mean_ms"]["verdict"] == "worse"  # E2E up ~50%, every pair
    assert guards["steady_rps"]["verdict"] == "no significant difference"
    assert outcome_of(out) == "helped, at a cost (long_e2e_mean_ms worse)"
    assert higher_is_better("steady_rps") and not higher_is_better("long_e2e_mean_ms")


def test_the_policy_under_diagnosis_is_read_from_its_log_else_its_flags(fixtures_dir):
    from latscope.campaign.priority import _policy_of
    from latscope.campaign.servers import LocalControl, Running

    def running(log, argv):
        return Running("http://x:1", "m", None, log, None, 1.0, argv)

    real = fixtures_dir / "vllm" / "cpu-vllm0.32" / "server.log"
    assert _policy_of(running(real, ["--scheduling-policy", "priority"]), None) == "fcfs"
    local = LocalControl(["--max-num-seqs", "2"])
    assert _policy_of(running(None, ["--max-num-seqs", "2"]), local) == "fcfs"
    assert _policy_of(running(None, ["--scheduling-policy", "priority"]), local) == "priority"
    assert _policy_of(None, local) is None
