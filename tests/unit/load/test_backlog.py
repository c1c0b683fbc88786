"""A fast server's responses are parsed without the unparsed backlog growing past its bound."""

from __future__ import annotations

from fakeserver import FakeServer

import latscope.load.runner as runner
from latscope.load import BenchConfig, run_bench


def test_a_zero_delay_stream_keeps_the_unparsed_backlog_bounded(tmp_path, monkeypatch):
    bound = 256 << 10  # small, so that a 2-core box's client surely falls behind the server
    monkeypatch.setattr(runner, "_FINALIZE_BACKLOG_BYTES", bound)
    with FakeServer(ttft_ms=0, itl_ms=0) as srv:
        config = BenchConfig(url=srv.url, model="fake-model", num_requests=640, concurrency=32,
                             warmup=32, output_dir=tmp_path / "run")
        config.workload.output_len = "256"
        result = run_bench(config)
    s, client = result.summary, result.summary["client"]
    assert s["requests"]["completed"] == 640 and s["tokens"]["output_total"] == 640 * 256
    # the bound, plus at most one response per slot that ended while the others waited
    response_bytes = 34 << 10  # a 256-token response of the fake server is ~33.8 KB
    assert 0 < client["unparsed_peak_bytes"] <= bound + 32 * response_bytes
    assert client["backpressure_waits"] > 0  # the slots waited instead of the loop parsing it all
