"""gateway_fits: propose the gateway only when queueing dominates and sizes differ widely;
gateway_run_shape: its A/B's runs outlast what sjf holds back."""

from __future__ import annotations

import math

import pytest

from latscope.errors import ConfigError
from latscope.gateway import gateway_fits
from latscope.gateway.fits import aging_horizon_s, gateway_run_shape

MIX_90_10 = [192] * 90 + [2304] * 10


def test_queueing_and_a_wide_mix_propose_it():
    fit = gateway_fits(0.7, MIX_90_10)
    assert fit.propose
    assert fit.evidence["size_cv"] == pytest.approx(1.571, abs=0.01)
    assert "70% of TTFT" in fit.reason


def test_little_queueing_does_not():
    fit = gateway_fits(0.2, MIX_90_10)
    assert not fit.propose
    assert "little to gain" in fit.reason


def test_similar_sizes_do_not():
    fit = gateway_fits(0.9, list(range(64, 257)))
    assert not fit.propose
    assert fit.evidence["size_cv"] < 0.5


def test_impossible_evidence_is_refused():
    with pytest.raises(ConfigError):
        gateway_fits(1.2, MIX_90_10)
    with pytest.raises(ConfigError):
        gateway_fits(0.5, [100])


def test_the_aging_horizon_is_the_deadline_offset_of_a_request():
    # queue.Waiter.deadline: arrival + aging_factor * cost / rate
    from latscope.gateway.queue import Waiter

    horizon = aging_horizon_s(768, 450.0, aging_factor=4.0)
    assert horizon == pytest.approx(Waiter(768, 0.0).deadline(4.0, 450.0))
    with pytest.raises(ConfigError):
        aging_horizon_s(768, 0.0)


def test_runs_last_five_horizons_of_the_long_requests():
    # diagnose's planted case: 90% of 40 tokens, 10% of 768, ~4.2 req/s, ~450 tokens/s at c=16
    sizes = [40] * 90 + [768] * 10
    shape = gateway_run_shape(sizes, 4.2, 450.0, min_requests=64, min_warmup=16)
    horizon = 4 * 768 / 450.0  # the 95th percentile is a long request
    assert shape.horizon_s == pytest.approx(horizon)
    assert shape.requests == math.ceil(5 * 4.2 * horizon)  # 144, not diagnose's default 64
    assert shape.warmup == math.ceil(4.2 * horizon)
    assert shape.horizon_requests == pytest.approx(4.2 * horizon)
    assert "while ~29 others are served (6.8 s" in shape.describe()


def test_a_fast_server_keeps_the_default_run_length():
    # an H200-like rate: five horizons pass within the default 4-per-slot requests
    shape = gateway_run_shape([192] * 90 + [2304] * 10, 140.0, 60_000.0, min_requests=1024,
                              min_warmup=256)
    assert (shape.requests, shape.warmup) == (1024, 256)


def test_impossible_rates_are_refused():
    with pytest.raises(ConfigError):
        gateway_run_shape([40, 768], 0.0, 450.0, min_requests=64, min_warmup=16)
    with pytest.raises(ConfigError):
        gateway_run_shape([], 4.0, 450.0, min_requests=64, min_warmup=16)
