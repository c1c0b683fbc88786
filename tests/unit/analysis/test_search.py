"""Flag search against synthetic objectives: finds the brute-force optimum with fewer evaluations."""

from __future__ import annotations

import math
import random

import pytest

from latscope.analysis.search import (
    Outcome,
    Param,
    better,
    config_key,
    coordinate_search,
    grid,
    grid_search,
    pareto_front,
    parse_param,
)
from latscope.errors import ConfigError

SEQS = parse_param("max_num_seqs=64..1024")
MBT = parse_param("max_num_batched_tokens=2048..16384")


def saturating_surface(cfg) -> float:
    """Throughput-like surface, unimodal along each flag: peaks at 256 seqs and 8192 tokens."""
    s = math.log2(cfg["max_num_seqs"])
    m = math.log2(cfg["max_num_batched_tokens"])
    return 100.0 - 6.0 * (s - 8) ** 2 - 4.0 * (m - 13) ** 2 - 1.5 * (s - 8) * (m - 13)


class CountingObjective:
    def __init__(self, fn, feasible=lambda cfg: True):
        self.fn, self.feasible, self.calls = fn, feasible, []

    def __call__(self, cfg) -> Outcome:
        self.calls.append(dict(cfg))
        return Outcome(self.feasible(cfg), self.fn(cfg))


def brute_force_best(params, fn, feasible=lambda cfg: True):
    return max(grid(params), key=lambda c: (feasible(c), fn(c)))


def test_parse_param_ranges_and_lists():
    assert SEQS == Param("max_num_seqs", (64, 128, 256, 512, 1024))
    assert MBT.values == (2048, 4096, 8192, 16384)
    assert parse_param("max-num-seqs=100..300").values == (100, 200, 300)  # hi always included
    assert parse_param("x=1..64*4").values == (1, 4, 16, 64)
    assert parse_param("gpu_memory_utilization=0.8,0.9").values == (0.8, 0.9)
    for bad in ("x", "x=", "x=8..4", "x=1,1", "x=0..8"):
        with pytest.raises(ConfigError):
            parse_param(bad)


def test_coordinate_search_finds_grid_optimum_with_fewer_evaluations():
    params = [SEQS, MBT]
    objective = CountingObjective(saturating_surface)
    result = coordinate_search(params, objective, min_gain=0.0)
    assert result.best == brute_force_best(params, saturating_surface)
    assert result.grid_size == 20
    assert result.evaluated == len(objective.calls) < result.grid_size / 2


def test_no_configuration_is_evaluated_twice():
    objective = CountingObjective(saturating_surface)
    coordinate_search([SEQS, MBT], objective, min_gain=0.0)
    keys = [config_key(c, [SEQS, MBT]) for c in objective.calls]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("peak", range(5))
def test_ternary_axis_search_finds_every_peak_position(peak):
    fn = lambda cfg: -abs(SEQS.values.index(cfg["max_num_seqs"]) - peak)  # noqa: E731
    result = coordinate_search([SEQS], CountingObjective(fn), min_gain=0.0)
    assert result.best["max_num_seqs"] == SEQS.values[peak]
    assert result.evaluated <= 4


def test_four_values_need_at_most_three_restarts():
    p = Param("max_num_seqs", (1, 2, 4, 8))
    for peak in range(4):
        fn = lambda cfg, peak=peak: -abs(p.values.index(cfg["max_num_seqs"]) - peak)  # noqa: E731
        result = coordinate_search([p], CountingObjective(fn), min_gain=0.0)
        assert result.best["max_num_seqs"] == p.values[peak]
        assert result.evaluated <= 3


def test_feasible_configuration_beats_any_infeasible_one():
    # The SLO holds only with few sequences; the raw optimum (256) violates it.
    feasible = lambda cfg: cfg["max_num_seqs"] <= 128  # noqa: E731
    objective = CountingObjective(saturating_surface, feasible)
    result = coordinate_search([SEQS, MBT], objective, min_gain=0.0)
    assert result.best_outcome.feasible
    assert result.best == brute_force_best([SEQS, MBT], saturating_surface, feasible)


def test_noise_below_min_gain_does_not_move_the_search():
    rng = random.Random(3)
    flat = lambda cfg: 50.0 * (1 + rng.uniform(-0.01, 0.01))  # noqa: E731
    start = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}
    result = coordinate_search([SEQS, MBT], CountingObjective(flat), start=start, min_gain=0.03)
    assert result.best == start


def test_start_must_be_on_the_grid():
    with pytest.raises(ConfigError, match="not among"):
        coordinate_search([SEQS], CountingObjective(saturating_surface), start={"max_num_seqs": 100})


def test_resume_from_cache_repeats_no_trial_and_reaches_same_answer():
    params = [SEQS, MBT]
    uninterrupted = coordinate_search(params, CountingObjective(saturating_surface), min_gain=0.0)

    cache: dict = {}
    done = []

    def dies_after_three(cfg):
        if len(done) == 3:
            raise KeyboardInterrupt
        done.append(cfg)
        return Outcome(True, saturating_surface(cfg))

    with pytest.raises(KeyboardInterrupt):
        coordinate_search(params, dies_after_three, min_gain=0.0, cache=cache)
    assert len(cache) == 3

    second = CountingObjective(saturating_surface)
    resumed = coordinate_search(params, second, min_gain=0.0, cache=cache)
    assert resumed.best == uninterrupted.best
    assert len(second.calls) == uninterrupted.evaluated - 3
    assert not any(config_key(c, params) in {config_key(d, params) for d in done} for c in second.calls)


def test_grid_search_evaluates_everything_and_baseline_first():
    start = {"max_num_seqs": 1024, "max_num_batched_tokens": 2048}
    objective = CountingObjective(saturating_surface)
    result = grid_search([SEQS, MBT], objective, start=start)
    assert objective.calls[0] == start
    assert result.evaluated == 20 == len(objective.calls)
    assert result.best == brute_force_best([SEQS, MBT], saturating_surface)


def test_better_respects_min_gain_and_failed_servers():
    assert better(Outcome(True, 104), Outcome(True, 100), 0.03)
    assert not better(Outcome(True, 102), Outcome(True, 100), 0.03)
    assert better(Outcome(True, 1), Outcome(False, 100))
    assert better(Outcome(False, -5), Outcome(False, -math.inf))


def test_pareto_front_drops_dominated_points():
    pts = [(10, 100), (20, 150), (15, 200), (30, 400), (5, 90)]
    assert pareto_front(pts) == [4, 0, 1, 3]  # (15, 200) is beaten by (20, 150)


@pytest.mark.parametrize("text", ["x=1..10*abc", "x=1.2.3..8", "x=e..8", "x=1..1e400"])
def test_malformed_ranges_are_config_errors_not_string_values(text):
    with pytest.raises(ConfigError, match="bad --param"):
        parse_param(text)
