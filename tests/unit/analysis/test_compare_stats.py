"""The statistics of ``latscope compare``, held to known truth: the block bootstrap's weights,
its weighted statistics against numpy's, the coverage of its 95% interval on synthetic runs
whose true change is known (means, medians, tails, and runs whose requests depend on each
other), Welch's between-run interval, and the minimum run length a tail needs."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from latscope.analysis.compare_stats import (
    Change,
    RunValues,
    between_runs,
    block_length,
    block_weights,
    blocks_of,
    difference,
    draws_of,
    expansion,
    min_requests,
    ratio_draws,
    relative_change,
    statistic,
    weighted_stats,
    wider,
)


def test_block_weights_draw_whole_blocks_of_consecutive_requests_wrapping_at_the_end():
    rng = np.random.default_rng(1)
    n, block = 10, 3
    w = block_weights(n, block, 500, rng)
    assert w.shape == (500, n)
    assert np.all(w.sum(axis=1) == 3 * 4)  # ceil(10/3) blocks of 3
    # one block alone: 3 consecutive ones, circular (a start at 9 covers 9, 0, 1)
    rng = np.random.default_rng(2)
    for _ in range(50):
        one = block_weights(n, n, 1, rng)[0]  # a block as long as the run: every request once
        assert np.all(one == 1)
    single = block_weights(n, 1, 2000, np.random.default_rng(3))
    assert single.mean() == pytest.approx(1.0, abs=0.02)  # i.i.d.: each request once on average


def test_weighted_statistics_are_numpys_for_unit_weights_and_follow_the_weights():
    rng = np.random.default_rng(4)
    values = rng.lognormal(3, 1, 301)
    ones = np.ones((1, values.size))
    got = weighted_stats(values, ones, ("mean", "p50", "p90", "p99"))
    assert got["mean"][0] == pytest.approx(values.mean())
    for stat in ("p50", "p90", "p99"):
        want = np.percentile(values, float(stat[1:]), method="inverted_cdf")
        assert got[stat][0] == want
    doubled = np.concatenate([values, values[:50]])
    weights = np.ones((1, values.size))
    weights[0, :50] = 2
    for stat in ("mean", "p90"):
        assert weighted_stats(values, weights, (stat,))[stat][0] == pytest.approx(
            statistic(doubled, stat))


def _coverage(stat: str, n: int, *, trials: int, factor: float, dependent: bool = False,
              block: int = 1, seed: int = 0) -> float:
    """Share of trials whose 95% interval holds the true ratio ``factor`` of two runs."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        runs = []
        for scale in (1.0, factor):
            values = rng.lognormal(3, 0.6, n)
            if dependent:  # waves of 8 requests sharing one slow or fast moment of the server
                values *= np.repeat(rng.lognormal(0, 0.3, -(-n // 8)), 8)[:n]
            runs.append(scale * values)
        draws = [draws_of([RunValues(v, block)], (stat,), draws=400, rng=rng)[stat]
                 for v in runs]
        c = relative_change(statistic(runs[0], stat), statistic(runs[1], stat), *draws,
                            units=blocks_of(n, block))
        hits += c.lo <= factor - 1 <= c.hi
    return hits / trials


@pytest.mark.slow
@pytest.mark.parametrize("stat", ["mean", "p50", "p90"])
def test_the_interval_holds_a_known_change_about_95_percent_of_the_time(stat):
    # 120 trials: a true coverage of 0.95 falls in [0.89, 1.0] with 99% probability
    assert _coverage(stat, 400, trials=120, factor=1.3) >= 0.89


@pytest.mark.slow
def test_a_p99_needs_requests_beyond_it_and_holds_its_coverage_with_them():
    assert min_requests("p99", 10) == 1000 and min_requests("p90", 10) == 100
    assert min_requests("p50", 10) == 20 and min_requests("mean", 20) == 20
    # with the requests it needs, the tail's interval holds its coverage
    assert _coverage("p99", 1000, trials=60, factor=1.2, seed=5) >= 0.85


@pytest.mark.slow
def test_blocks_keep_their_coverage_where_requests_depend_on_each_other():
    # requests in waves share the server's moment: an i.i.d. bootstrap's interval is too
    # narrow there; blocks of two waves hold it
    iid = _coverage("mean", 400, trials=120, factor=1.2, dependent=True, block=1, seed=6)
    blocks = _coverage("mean", 400, trials=120, factor=1.2, dependent=True, block=16, seed=6)
    assert blocks >= 0.89
    assert iid < blocks


def test_the_expansion_is_t_over_z_with_k_over_k_minus_one():
    assert expansion(8) == pytest.approx(sps.t.ppf(0.975, 7) / sps.norm.ppf(0.975)
                                         * (8 / 7) ** 0.5)
    assert expansion(8) == pytest.approx(1.29, abs=0.01)
    assert 1.0 < expansion(1000) < 1.005 and expansion(None) == 1.0
    assert blocks_of(64, 8) == 8 and blocks_of(65, 8) == 9


def test_a_ratio_estimator_draws_summed_numerators_over_summed_denominators():
    rng = np.random.default_rng(7)
    sums, counts = rng.uniform(10, 20, 200), rng.integers(5, 15, 200).astype(float)
    draws = ratio_draws([(sums, counts, 1)], draws=2000, rng=rng)
    point = sums.sum() / counts.sum()
    assert np.median(draws) == pytest.approx(point, rel=0.02)
    assert np.quantile(draws, 0.025) < point < np.quantile(draws, 0.975)


def test_welch_between_runs_matches_scipys_t_interval_on_the_logs():
    base, new = [100.0, 104.0, 98.0, 101.0], [120.0, 126.0, 118.0]
    c = between_runs(base, new)
    a, b = np.log(base), np.log(new)
    ci = sps.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert c.lo == pytest.approx(np.expm1(ci.low))
    assert c.hi == pytest.approx(np.expm1(ci.high))
    assert c.point == pytest.approx(np.expm1(b.mean() - a.mean()))
    assert between_runs([100.0], [120.0, 121.0]).lo is None  # one run: no spread to speak of


def test_a_share_changes_by_a_difference_in_points_and_zero_stays_zero():
    rng = np.random.default_rng(8)
    none = np.zeros(200)
    some = (rng.random(200) < 0.1).astype(float)
    d0 = draws_of([RunValues(none, 4)], ("mean",), draws=500, rng=rng)["mean"]
    d1 = draws_of([RunValues(some, 4)], ("mean",), draws=500, rng=rng)["mean"]
    c = difference(0.0, some.mean(), d0, d1)
    assert not c.relative and c.point == pytest.approx(some.mean())
    assert 0 < c.lo < c.point < c.hi
    same = difference(0.0, 0.0, d0, d0)
    assert (same.lo, same.hi) == (0.0, 0.0)


def test_no_ratio_of_a_zero_and_the_wider_interval_wins():
    assert relative_change(0.0, 5.0, None, None).point is None
    narrow, wide = Change(0.1, 0.05, 0.15), Change(0.1, -0.2, 0.4)
    assert wider(narrow, wide) == (wide, 1)
    assert wider(wide, narrow) == (wide, 0)
    assert wider(narrow, Change(0.1)) == (narrow, 0)


def test_a_block_is_two_waves_of_the_requests_in_flight_and_a_run_eight_blocks_at_least():
    assert block_length(1000, 8) == 16
    assert block_length(1000, 2) == 10  # n^(1/3) is larger
    assert block_length(1000, 64) == 125  # 8 blocks
    assert block_length(64, 8) == 8
    assert block_length(5, 64) == 1  # never fewer than 8 blocks where it can be helped
