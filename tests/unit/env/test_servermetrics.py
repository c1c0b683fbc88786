"""/metrics checks on the real pages in shared/fixtures/vllm (cumulative since server start)."""

from __future__ import annotations

import pytest

from latscope.env.facts import Facts, ServerFacts
from latscope.server.hostview import HostView
from latscope.findings.servermetrics import check_metrics
from latscope.model import Severity


def findings_for(path) -> dict:
    facts = Facts(host=HostView(), server=ServerFacts(url="http://10.0.0.5:8000",
                                                      metrics_text=path.read_text()))
    return {f.id: f for f in check_metrics(facts)}


def values(finding) -> dict:
    return {e.name: e.value for e in finding.evidence}


def test_h200_after_c128_decomposes_ttft(fixtures_dir):
    found = findings_for(fixtures_dir / "vllm/h200-vllm0.26/metrics_after_c128.txt")
    parts = values(found["server.ttft_parts"])
    # The page's own _sum/_count lines: TTFT 419.2896 s / 720, queue 109.5020 s / 720,
    # prefill 167.4030 s / 720.
    assert parts["mean TTFT"] == pytest.approx(419.2895715 / 720 * 1000, abs=1e-3)
    assert parts["mean queue time"] == pytest.approx(109.5020238 / 720 * 1000, abs=1e-3)
    assert parts["mean prefill time"] == pytest.approx(167.4029797 / 720 * 1000, abs=1e-3)
    assert parts["frontend = TTFT - queue - prefill"] == pytest.approx(
        (419.2895715 - 109.5020238 - 167.4029797) / 720 * 1000, abs=2e-3)
    assert found["server.ttft_parts"].severity == Severity.INFO  # no part above half of TTFT
    assert found["server.preemptions"].severity == Severity.OK
    assert "29.0%" in found["server.prefix_cache"].title  # 214064 / 737325 tokens
    assert found["server.cache_config"].severity == Severity.INFO


def test_cpu_tiny_model_is_frontend_bound(fixtures_dir):
    found = findings_for(fixtures_dir / "vllm/cpu-vllm0.32/metrics.txt")
    bound = found["latency.engine_frontend"]
    # (11.5351 - 0.0103 - 4.3889) s over 264 requests = 27.0 ms of a 43.7 ms mean TTFT
    assert bound.severity == Severity.WARNING and bound.role == "symptom"  # 62% of server TTFT
    assert bound.impact["measured_at"] == "all requests since server start"
    assert bound.impact["share"] == pytest.approx((11.535064 - 0.010259 - 4.388950) / 11.535064,
                                                  abs=1e-3)
    assert "0.0%" in found["server.prefix_cache"].title


def test_disable_log_stats_page_is_flagged(fixtures_dir):
    found = findings_for(fixtures_dir / "vllm/cpu-vllm0.32/metrics_disable_log_stats.txt")
    assert set(found) == {"server.stats_disabled"}
    assert found["server.stats_disabled"].severity == Severity.INFO


def test_no_url_is_skipped():
    facts = Facts(host=HostView())
    [finding] = check_metrics(facts)
    assert finding.severity == Severity.SKIPPED and "no --url" in finding.title
