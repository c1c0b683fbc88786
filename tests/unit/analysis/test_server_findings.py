"""Findings from /metrics snapshots and from a decomposition."""

from __future__ import annotations

from latscope.analysis.decompose import Component, Decomposition
from latscope.analysis.server_findings import findings_from_decomposition, findings_from_metrics
from latscope.model import MetricSnapshot, Severity
from latscope.server.metrics import parse_metrics_text


def _snap(t_s: float, preempt: float, kv: float, deferred: float = 0.0) -> MetricSnapshot:
    text = ("# TYPE vllm:num_preemptions counter\n"
            f'vllm:num_preemptions_total{{engine="0"}} {preempt}\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0"}} {kv}\n'
            "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
            f'vllm:num_requests_waiting_by_reason{{engine="0",reason="capacity"}} 1\n'
            f'vllm:num_requests_waiting_by_reason{{engine="0",reason="deferred"}} {deferred}\n')
    return MetricSnapshot(int(t_s * 1e9), t_s, parse_metrics_text(text).samples)


def test_preemptions_and_kv_saturation_from_scrapes():
    snaps = [_snap(0, 10, 0.5), _snap(2, 10, 0.93), _snap(4, 16, 0.97, deferred=3)]
    found = {f.id: f for f in findings_from_metrics(snaps)}
    pre = found["server.preemptions"]
    assert pre.evidence[0].value == 6.0  # 16 - 10 during the run, not the 16 since start
    assert pre.evidence[1].value == 1.5  # per second over the 4 s window
    kv = found["server.kv_saturation"]
    assert kv.severity == Severity.WARNING and kv.evidence[0].value == 0.97
    assert found["server.waiting_deferred"].evidence[0].value == 3.0


def test_quiet_run_and_disabled_stats(fixtures_dir):
    assert findings_from_metrics([_snap(0, 5, 0.1), _snap(2, 5, 0.2)]) == []
    text = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics_disable_log_stats.txt").read_text()
    snap = MetricSnapshot(0, 0.0, parse_metrics_text(text).samples)
    assert [f.id for f in findings_from_metrics([snap])] == ["server.stats_disabled"]
    assert findings_from_metrics([])[0].severity == Severity.SKIPPED


def _decomp(queue: float, net: float) -> Decomposition:
    total = 100.0
    rows = [Component("ttft", "TTFT (client)", None, "client", total),
            Component("ttft.network", "network", "ttft", "diff", net, share=net / total),
            Component("ttft.server.queue", "queue", "ttft.server", "hist", queue,
                      share=queue / total)]
    dominant = "ttft.server.queue" if queue >= net else "ttft.network"
    return Decomposition(rows, dominant, None, 10.0, "histograms", 10, 10.0)


def test_decomposition_names_the_dominant_share():
    found = {f.id: f for f in findings_from_decomposition(_decomp(queue=70.0, net=25.0))}
    assert found["server.queue_dominates_ttft"].severity == Severity.CRITICAL
    assert found["server.queue_dominates_ttft"].impact["share"] == 0.7
    assert found["server.network_frontend_share"].severity == Severity.WARNING
    assert findings_from_decomposition(_decomp(queue=10.0, net=5.0)) == []
