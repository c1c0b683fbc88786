"""Knee detection on recorded and analytic curves, SLO parsing and the operating point."""

from __future__ import annotations

import random

import pytest

from latscope.analysis.knee import (
    CurvePoint,
    find_knee,
    highest_load_meeting,
    interpolate,
    no_knee_reason,
    operating_point,
    parse_slo,
)
from latscope.errors import ConfigError

# vLLM 0.26 on one H200, 8B model, 1024-token prompts, default flags (issue 7).
H200_CONCURRENCY = [1, 8, 32, 128, 256, 512]
H200_REQ_S = [1.4, 9.4, 24.2, 33.1, 43.9, 30.2]
H200_MEAN_TTFT_MS = [60, 165, 321, 819, 1064, 5598]


def h200_points() -> list[CurvePoint]:
    return [CurvePoint(c, r, t) for c, r, t in zip(H200_CONCURRENCY, H200_REQ_S, H200_MEAN_TTFT_MS)]


def littles_law_curve(loads, single_latency_s=0.1, capacity_rps=40.0) -> list[CurvePoint]:
    """Closed loop against a server of fixed capacity: X = min(c/L0, cap), latency = c/X.

    Its saturation point is exactly c* = cap * L0 (Little's law), an answer known independently.
    """
    pts = []
    for c in loads:
        x = min(c / single_latency_s, capacity_rps)
        pts.append(CurvePoint(c, x, 1000.0 * c / x))
    return pts


def test_h200_knee_is_where_throughput_peaks_and_ttft_explodes():
    # Issue 7: "Past 256, throughput fell while TTFT grew five-fold."
    knee = find_knee(h200_points(), "mean TTFT")
    assert knee is not None
    assert knee.load == 256
    assert knee.measured_past  # the 512 step fell to 30.2 req/s
    assert knee.confidence in ("high", "medium")


def test_h200_curve_cut_before_the_collapse_is_not_called_confident():
    # Without the 512 step throughput was still rising 81% from 32 to 256: no saturation seen.
    knee = find_knee(h200_points()[:-1])
    assert knee is not None
    assert not knee.measured_past
    assert knee.confidence == "low"
    assert any("further right" in r for r in knee.reasons)
    # the reason cites the gains it judged by, each above 10% (not "no higher load measured")
    reason = next(r for r in knee.reasons if "further right" in r)
    later = [p for p in h200_points()[:-1] if p.load > knee.load]
    assert later and all(f"{p.load:g}: +" in reason for p in later)


def test_knee_matches_analytic_saturation_point_of_littles_law_model():
    loads = [1, 2, 4, 8, 16, 32]  # c* = 40 req/s * 0.1 s = 4
    knee = find_knee(littles_law_curve(loads))
    assert knee is not None and knee.load == 4
    assert knee.confidence == "high"


def test_input_order_does_not_matter():
    pts = h200_points()
    shuffled = pts[:]
    random.Random(1).shuffle(shuffled)
    assert find_knee(shuffled).load == find_knee(pts).load


def test_straight_line_has_no_knee():
    pts = [CurvePoint(c, 2.0 * c, 10.0 * c) for c in (1, 2, 4, 8, 16)]
    assert find_knee(pts) is None


def test_latency_that_only_wobbles_has_no_knee():
    # Recorded against a fixed-delay fake server: req/s doubles with concurrency while E2E p50
    # stays at 65-69 ms; normalising that 6% wobble to [0, 1] must not invent a knee.
    pts = [CurvePoint(c, r, l) for c, r, l in
           [(1, 15.1, 65.5), (2, 30.44, 65.4), (4, 60.1, 65.5), (8, 114.33, 69.1), (16, 228.12, 67.7)]]
    assert find_knee(pts) is None
    assert "saturated" in no_knee_reason([p.throughput for p in pts], [p.latency for p in pts])


def test_too_few_steps_give_no_knee():
    assert find_knee(h200_points()[:2]) is None


def test_noise_larger_than_the_curve_lowers_stability():
    loads = [1, 2, 4, 8, 16, 32]
    quiet = find_knee([CurvePoint(p.load, p.throughput, p.latency, 0.01 * p.throughput, 0.01 * p.latency)
                       for p in littles_law_curve(loads)])
    noisy = find_knee([CurvePoint(p.load, p.throughput, p.latency, 0.8 * p.throughput, 0.8 * p.latency)
                       for p in littles_law_curve(loads)])
    assert quiet.stability > 0.9
    assert noisy.stability < quiet.stability
    assert noisy.confidence != "high"


def test_parse_slo_and_reject_bad_terms():
    terms = parse_slo("ttft_p99_ms<=500, itl_p99 < 50, e2e<=9000, ttft=700, requests_per_s>=2")
    assert [(t.metric, t.op, t.limit) for t in terms] == [
        ("ttft_p99_ms", "<=", 500.0), ("itl_p99_ms", "<", 50.0),
        ("e2e_max_ms", "<=", 9000.0),  # a per-request term judges a step by its worst request
        ("ttft_max_ms", "<=", 700.0), ("requests_per_s", ">=", 2.0)]
    assert parse_slo("") == []
    with pytest.raises(ConfigError, match="bad --slo term"):
        parse_slo("ttft_p99_ms=500")


def test_highest_load_meeting_slo_on_h200_curve():
    steps = [(c, {"ttft_mean_ms": t}) for c, t in zip(H200_CONCURRENCY, H200_MEAN_TTFT_MS)]
    load, monotone = highest_load_meeting(steps, parse_slo("ttft_mean_ms<=1000"))
    assert (load, monotone) == (128, True)  # 819 ms at 128, 1064 ms at 256
    assert highest_load_meeting(steps, parse_slo("ttft_mean_ms<=10")) == (None, True)


def test_non_monotone_slo_curve_is_flagged():
    steps = [(1, {"m": 5}), (2, {"m": 50}), (4, {"m": 5})]
    assert highest_load_meeting(steps, parse_slo("m<=10")) == (4, False)


def test_unmeasured_metric_never_meets_slo():
    assert highest_load_meeting([(1, {})], parse_slo("ttft_p99_ms<=1")) == (None, True)


def test_operating_point_backs_off_from_knee_and_respects_slo():
    assert operating_point(256) == 230  # floor(0.9 * 256)
    assert operating_point(256, slo_load=128) == 128
    assert operating_point(1) == 1  # never below one request in flight
    assert operating_point(10.0, integer=False) == pytest.approx(9.0)


def test_interpolate_between_steps_and_refuse_to_extrapolate():
    thr, lat = interpolate(h200_points(), 192)
    assert thr == pytest.approx((33.1 + 43.9) / 2)
    assert lat == pytest.approx((819 + 1064) / 2)
    assert interpolate(h200_points(), 1024) is None


@pytest.mark.parametrize("term", ["ttft_p99_ms<=1.2.3", "ttft_p99_ms<=e", "ttft_p99_ms<=--"])
def test_parse_slo_rejects_numbers_the_regex_admits(term):
    with pytest.raises(ConfigError, match="bad --slo term"):
        parse_slo(term)
