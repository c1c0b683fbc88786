"""Per-request spans from the real vLLM (CPU build, tiny model) joined to the client's records.

The session's ``vllm_target_constrained`` (``--max-num-seqs 2``) exports its spans to an OTLP
endpoint on a loopback port chosen up front: each test listens there with its own receiver (the
API's ``SpanCollector``, or ``latscope bench --otlp-listen`` in a subprocess), the way a user
points a remote server at latscope. The last test uses the session's untraced ``vllm_target``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import orjson

from latscope.analysis.decompose import decompose_run
from latscope.analysis.join import RequestSplit
from latscope.load import BenchConfig, run_bench
from latscope.server.otlp import SpanCollector
from latscope.server.otlp_record import SpanRecorder
from latscope.server.scrape import MetricsScraper
from latscope.server.target import LocalTarget

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def traced(vllm_target_constrained: LocalTarget) -> tuple[LocalTarget, int]:
    """The traced server and the port its spans go to."""
    port = urlsplit(vllm_target_constrained.otlp_endpoint or "").port
    assert port, "vllm_target_constrained exports no spans"
    return vllm_target_constrained, port


def _traced_run(target: LocalTarget, port: int, out: Path, n: int = 16,
                concurrency: int = 16) -> tuple[list, SpanRecorder]:
    config = BenchConfig(url=target.url, num_requests=n, concurrency=concurrency,
                         trace_requests=True, tokenizer=str(target.tokenizer_dir),
                         output_dir=out, stagger=False)  # 16 at once: the queue is the point
    config.workload.input_len, config.workload.output_len = "64", "16"
    with SpanCollector(f"127.0.0.1:{port}") as collector:
        recorder = SpanRecorder(collector)
        result = run_bench(config, [MetricsScraper(interval_s=1.0), recorder],
                           on_record=lambda r: recorder.expect(r.trace_id if r.ok else None))
    return result.records, recorder


def test_every_request_is_joined_and_the_queue_shows_per_request(traced, tmp_path) -> None:
    target, port = traced
    records, recorder = _traced_run(target, port, tmp_path / "run")
    completed = [r for r in records if r.ok and not r.warmup]
    assert len(completed) == 16
    result = decompose_run(tmp_path / "run")
    split = result.split
    assert split is not None
    assert split.joined == split.completed == len(completed), split.notes
    assert split.without_span == 0
    # the run's rows went to per_request.json as the join read them (none kept): in send order
    rows = sorted((RequestSplit(**row) for row in orjson.loads(
        (tmp_path / "run" / "per_request.json").read_bytes())["rows"]), key=lambda r: r.sent_ns)
    assert not split.rows and len(rows) == split.joined

    # --max-num-seqs 2, 16 at once: the first two start at once, the others wait. (Not
    # "exactly two": the API server tokenizes one request after another, so on a busy host a
    # third can reach the engine just as a slot frees.)
    queue = sorted(r.queue_ms for r in rows)
    assert queue[0] < 5 and queue[1] < 5, queue
    assert all(r.queue_ms < 5 for r in rows[:2]), queue  # the first two sent
    assert statistics.median(queue) > 10 * max(queue[1], 1.0), queue
    assert split.stats["queue_ms"]["p99"] > split.stats["prefill_ms"]["p50"]
    # ... and the rest wait longer the later they were sent (first come, first served)
    from scipy.stats import spearmanr
    assert spearmanr(range(len(rows)), [r.queue_ms for r in rows])[0] > 0.7

    # the server's interval lies inside the client's, request by request
    for row in rows:
        assert row.server_ttft_ms <= row.client_ttft_ms, row
        assert row.queue_ms + row.prefill_ms <= row.server_ttft_ms, row

    # the decomposition takes its server rows from the spans, and says so
    for key in ("ttft.server", "ttft.server.queue", "ttft.server.prefill", "ttft.frontend"):
        assert result.component(key).source.startswith("per-request spans (OTLP)"), key
    assert result.dominant_ttft == "ttft.server.queue"
    assert recorder.status()["expected_missing"] == 0


def test_bench_cli_with_otlp_listen_prints_the_per_request_split(traced, tmp_path) -> None:
    target, port = traced
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, "-m", "latscope", "bench", "--url", target.url, "-n", "12", "-c", "6",
         "--input-len", "32", "--output-len", "8", "--tokenizer", str(target.tokenizer_dir),
         "--otlp-listen", f"127.0.0.1:{port}", "--no-progress",
         "--output-dir", str(tmp_path / "cli")],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert f"--otlp-traces-endpoint http://127.0.0.1:{port}/v1/traces" in out  # remote hint
    assert "Per request, joined with the server's spans: 12 of 12 requests" in out
    table = out[out.index("Per request, joined"):]
    assert max(len(line) for line in table.splitlines()) <= 80
    for label in ("queue", "prefill", "server TTFT", "network + HTTP frontend", "Slowest"):
        assert label in table
    assert (tmp_path / "cli" / "spans.jsonl").stat().st_size > 0
    assert (tmp_path / "cli" / "per_request.json").is_file()


def test_a_server_without_tracing_falls_back_and_says_so(vllm_target, tmp_path) -> None:
    config = BenchConfig(url=vllm_target.url, num_requests=8, concurrency=4,
                         trace_requests=True, output_dir=tmp_path / "run")
    config.workload.input_len, config.workload.output_len = "32", "8"
    with SpanCollector() as collector:
        recorder = SpanRecorder(collector, max_wait_s=2.0)
        run_bench(config, [MetricsScraper(interval_s=1.0), recorder],
                  on_record=lambda r: recorder.expect(r.trace_id))
    assert recorder.spans == 0
    result = decompose_run(tmp_path / "run")
    assert result.split is None
    assert any("server sent no request spans" in note for note in result.notes)
    queue = result.component("ttft.server.queue")
    assert "histogram" in queue.source and queue.mean_ms is not None
