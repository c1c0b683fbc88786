"""The control loop's line scan of vLLM's /metrics, on real pages, against the full parser."""

from __future__ import annotations

import pytest

from latscope.gateway.proxy import gauges
from latscope.server.metrics import parse_metrics_text

NAMES = ("vllm:num_requests_waiting", "vllm:num_requests_running")


@pytest.mark.parametrize("page", ["h200-vllm0.26/metrics_after_c512.txt",
                                  "cpu-vllm0.32/metrics.txt"])
def test_line_scan_matches_the_prometheus_parser(fixtures_dir, page):
    text = (fixtures_dir / "vllm" / page).read_text()
    parsed = parse_metrics_text(text)
    assert gauges(text, NAMES) == {n: parsed.value(n) for n in NAMES}


def test_sums_engines_and_ignores_the_by_reason_series():
    text = ('vllm:num_requests_waiting{engine="0"} 2.0\n'
            'vllm:num_requests_waiting{engine="1"} 3.0\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0\n'
            '# HELP vllm:num_requests_running x\n')
    assert gauges(text, NAMES) == {"vllm:num_requests_waiting": 5.0}
