"""A run's memory does not grow with its length, the passes after the load included (issue #52:
a 50,000-request ``bench`` peaked at 863 MB the moment its load ended, ~16 kB a request, when the
decomposition read every record and its token times back at once)."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import orjson
import pytest

from fakeserver import FakeServer
from latscope.analysis.decompose import decompose_run
from latscope.load.summary import rebuild_summary
from latscope.model import RequestRecord
from latscope.rundir import SCHEMA_VERSION, record_line

pytestmark = pytest.mark.slow

MS = 1_000_000


def _bench_peak_mb(url: str, requests: int, out: Path) -> float:
    """The whole ``latscope bench`` process's peak resident memory (the kernel's count,
    ``wait4``), its load and every pass after it (decomposition, report) included."""
    cmd = [sys.executable, "-m", "latscope", "bench", "--url", url, "--model", "fake-model",
           "-n", str(requests), "-c", "32", "--input-len", "16", "--output-len", "256",
           "--no-progress", "--workers", "1", "--scrape-interval", "0.5", "--output-dir",
           str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    assert (out / "decomposition.json").is_file()  # the pass after the load ran
    return usage.ru_maxrss / 1024


def test_a_bench_ten_times_longer_peaks_within_a_few_mb(tmp_path):
    # 256-token responses, /metrics scraped (the fake server has no such page: the scrapes fail
    # fast, and the decomposition still reads every record, as against vLLM). Before: ~16 kB a
    # request at the end of the run, +80 MB for the 5,400 more here; now the prompts built
    # before the run (~0.3 kB each) are most of what grows
    with FakeServer(ttft_ms=0, itl_ms=0, tokenize_mode="off") as srv:
        short = _bench_peak_mb(srv.url, 600, tmp_path / "short")
        srv.reset()
        long = _bench_peak_mb(srv.url, 6000, tmp_path / "long")
    assert long - short < 12, (short, long)


def _write_run(run: Path, n: int, traced: bool) -> None:
    """A finished bench run directory of ``n`` 256-token records (per-request server timings
    on each, a W3C trace id and the server's span for each where ``traced``), no summary."""
    run.mkdir()
    (run / "manifest.json").write_bytes(orjson.dumps({
        "schema_version": SCHEMA_VERSION, "kind": "bench", "start_ns": 10**12,
        "config": {"percentiles": [50, 99], "concurrency": 32}}))
    spans = []
    with open(run / "requests.jsonl", "wb") as f:
        for i in range(n):
            sent = 10**12 + i * 3 * MS
            trace = f"{i + 1:032x}" if traced else None
            times = [sent + 20 * MS + k * 100_000 for k in range(256)]
            f.write(record_line(RequestRecord(
                index=i, request_id=f"r-{i}", scheduled_ns=sent, sent_ns=sent,
                first_token_ns=times[0], end_ns=times[-1], chunk_ns=times, status=200,
                output_tokens=256, output_tokens_source="usage", prompt_tokens=16,
                warmup=i < 8, trace_id=trace, group="a" if i % 3 else "b",
                server={"metrics": {"queue_time_ms": 1.0, "time_to_first_token_ms": 9.0,
                                    "generation_time_ms": 25.0}})))
            if traced:
                spans.append(orjson.dumps({"trace_id": trace, "span_id": f"{i + 1:016x}",
                                           "parent_span_id": "", "name": "llm_request",
                                           "kind": "server", "start_unix_ns": sent,
                                           "end_unix_ns": times[-1], "resource": {},
                                           "scope": "vllm", "received_unix_ns": times[-1],
                                           "attributes": {
                                               "gen_ai.latency.time_to_first_token": 0.012,
                                               "gen_ai.latency.time_in_queue": 0.001,
                                               "gen_ai.latency.time_in_model_prefill": 0.009,
                                               "gen_ai.latency.time_in_model_decode": 0.025,
                                               "gen_ai.latency.e2e": 0.04,
                                               "gen_ai.request.id": f"cmpl-r-{i}"}}))
    if traced:
        (run / "spans.jsonl").write_bytes(b"\n".join(spans) + b"\n")


def _passes_peak(run: Path) -> int:
    """The Python heap's peak (bytes) over the passes a finished run gets: the decomposition
    with the join to the server's spans, and the summary rebuilt from the records."""
    tracemalloc.start()
    try:
        split = decompose_run(run).split
        rebuilt = rebuild_summary(run)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rebuilt["requests"]["completed"] > 0
    assert split is not None and split.joined == rebuilt["requests"]["completed"]
    return peak


def test_the_passes_after_a_run_hold_bytes_a_request_not_its_records(tmp_path):
    # the decomposition, the join with the spans and the rebuilt summary each read the
    # records once, a line at a time, token times left unread: what grows is a few floats a
    # request (and a span's timings until its record came), not ~9 kB of token times
    small, large = 400, 4000
    _write_run(tmp_path / "small", small, traced=True)
    _write_run(tmp_path / "large", large, traced=True)
    grown = _passes_peak(tmp_path / "large") - _passes_peak(tmp_path / "small")
    per_request = grown / (large - small)
    assert per_request < 600, f"{per_request:.0f} bytes a request"
    rows = orjson.loads((tmp_path / "large" / "per_request.json").read_bytes())["rows"]
    assert len(rows) == large - 8  # every measured request, written as it was joined
