"""Server observation against the real local vLLM: scraping in step with load, the decomposition
naming queueing when it grows, and `logs` reading the live server's log."""

from __future__ import annotations

import json

import pytest

from latscope.analysis.decompose import decompose_run
from latscope.findings.latency import findings_from_decomposition
from latscope.findings.server import findings_from_log
from latscope.load import BenchConfig, WorkloadSpec, run_bench
from latscope.server.logs import parse_log
from latscope.server.scrape import MetricsScraper, read_snapshots

pytestmark = pytest.mark.integration


def _bench(target, out, *, concurrency: int, num: int | None = None, duration: float | None = None,
           input_len: str = "256", output_len: str = "16", interval: float = 0.5):
    cfg = BenchConfig(url=target.url, model=target.model_name, concurrency=concurrency,
                      num_requests=num, duration_s=duration, output_dir=out,
                      tokenizer=str(target.tokenizer_dir) if target.tokenizer_dir else None,
                      workload=WorkloadSpec(input_len=input_len, output_len=output_len))
    result = run_bench(cfg, observers=[MetricsScraper(interval_s=interval)])
    return result, decompose_run(result.run_dir)


def test_queue_time_grows_with_concurrency(vllm_target, tmp_path):
    low_run, low = _bench(vllm_target, tmp_path / "c1", concurrency=1, num=8)
    high_run, high = _bench(vllm_target, tmp_path / "c48", concurrency=48, num=96)
    for run, result in ((low_run, low), (high_run, high)):
        snaps = read_snapshots(run.run_dir)
        assert len(snaps) >= 2 and snaps[0].t_ns >= run.manifest["start_ns"]
        # the server counted exactly the client's requests in the window
        assert result.server_requests == result.client_requests == len(run.records)
        assert (run.run_dir / "server_timeseries.json").is_file()
        scrape = json.loads((run.run_dir / "metrics" / "scrape.json").read_text())
        assert scrape["status"] == "ok"
    q_low = low.component("ttft.server.queue").mean_ms
    q_high = high.component("ttft.server.queue").mean_ms
    assert q_high > 5 * q_low and q_high > 1.0, (q_low, q_high)
    assert high.component("ttft.server").mean_ms > low.component("ttft.server").mean_ms
    # the split is consistent: the server's TTFT never exceeds what the client saw
    for result in (low, high):
        assert result.component("ttft.server").mean_ms <= result.component("ttft").mean_ms


def test_constrained_server_names_queueing(vllm_target_constrained, tmp_path):
    target = vllm_target_constrained
    run, result = _bench(target, tmp_path / "c16", concurrency=16, duration=24.0,
                         input_len="64", output_len="32", interval=1.0)
    assert result.dominant_ttft == "ttft.server.queue", [(c.key, c.mean_ms) for c in result.components]
    ids = {f.id for f in findings_from_decomposition(result)}
    assert "latency.queue" in ids
    log = parse_log(target.log_path)
    assert log.config["max_num_seqs"] == 2
    assert log.config["log_level"] == "DEBUG" and log.config["request_logging"] is True
    log_ids = {f.id for f in findings_from_log(log)}
    assert "server.queue_max_num_seqs" in log_ids, [(p.running, p.waiting) for p in log.stats]
    assert {"server.debug_logging", "server.request_logging"} <= log_ids
    assert log.line_rate.request_lines >= len(run.records)
