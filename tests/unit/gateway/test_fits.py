"""gateway_fits: propose the gateway only when queueing dominates and sizes differ widely."""

from __future__ import annotations

import pytest

from latscope.errors import ConfigError
from latscope.gateway import gateway_fits

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
