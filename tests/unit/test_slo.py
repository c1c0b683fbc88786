"""One SLO grammar: per-request terms for bench's goodput, statistics for sweep/tune/diagnose."""

from __future__ import annotations

import pytest

from latscope.analysis.knee import parse_slo as step_terms
from latscope.errors import ConfigError
from latscope.load.config import parse_slo as goodput_slo
from latscope.slo import parse


def test_one_grammar_says_per_request_and_percentile():
    per_request, p99, legacy = parse("ttft<=500, ttft_p99_ms<400, tpot=50")
    assert per_request.per_request and per_request.step_key == "ttft_max_ms"
    assert not p99.per_request and p99.step_key == "ttft_p99_ms" and p99.op == "<"
    assert legacy.per_request and legacy.op == "<=" and legacy.limit == 50.0


def test_bench_takes_per_request_terms_and_explains_percentiles():
    assert goodput_slo("ttft<=200,e2e=5000") == {"ttft": 200.0, "e2e": 5000.0}
    with pytest.raises(ConfigError, match="judged per step by sweep"):
        goodput_slo("ttft_p99<=200")


def test_steps_judge_per_request_terms_on_the_worst_request():
    [term] = step_terms("itl<=80")
    assert term.holds({"itl_max_ms": 79.0}) and not term.holds({"itl_max_ms": 81.0})


@pytest.mark.parametrize("bad", ["ttft<=abc", "ttft<=1.2.3", "ttft_p99=500", "rps=3", "<=5",
                                 "ttft<=inf"])
def test_bad_terms_are_one_line_errors(bad):
    with pytest.raises(ConfigError, match="bad --slo term"):
        parse(bad)
