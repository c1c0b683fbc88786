"""latscope's TTFT and ITL held against the fake server's own truth timestamps.

Both processes stamp with CLOCK_MONOTONIC, so causality is exact: the client cannot schedule a
request after the server read it, nor see a chunk before the server wrote it. Tolerances on the
error (reported - true) are looser than the benchmark bars (p50 <= 2 ms, p99 <= 10 ms) because
CI and dev boxes (2 cores, shared with other work: load averages of 6-7 were seen while writing
this) starve both processes at concurrency 256; benchmarks/client_overhead.py holds the bars.
"True TTFT" is the server's first-chunk write time minus the kernel's receive time of the request
(SO_TIMESTAMPNS), so the server's own backlog under a burst is not charged to the client.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakeserver import FakeServer

from latscope.stats import ttft_ms
from latscope.load import BenchConfig, run_bench

# held against the fake server's own timestamps at up to 256 streams: never beside other tests
# (run beside another suite on this 2-core box, the 256-stream case missed its tolerance)
pytestmark = [pytest.mark.serial, pytest.mark.slow]

TTFT_MS, ITL_MS = 50.0, 10.0


@pytest.fixture(scope="module")
def server():
    with FakeServer(ttft_ms=TTFT_MS, itl_ms=ITL_MS) as srv:
        yield srv


def _run(server, tmp_path, concurrency: int, n: int, tokens: int):
    server.reset()
    # warm-up opens the connections: the cold TCP connect storm of 256 sockets is real latency,
    # but not a measurement error, and this test is about the latter
    config = BenchConfig(url=server.url, num_requests=n, concurrency=concurrency,
                         warmup=concurrency, output_dir=tmp_path / f"c{concurrency}",
                         model="fake-model")
    config.workload.output_len = str(tokens)
    result = run_bench(config)
    return result, server.truth()


def _check(result, truth, n: int, tokens: int) -> dict[str, float]:
    """Asserts what must hold exactly (causality, counts); returns the error figures."""
    assert result.summary["requests"]["completed"] == n
    ttft_err, itl_err, true_ttfts = [], [], []
    for rec in (r for r in result.records if not r.warmup):
        t = truth[rec.request_id]
        # causality on one clock: these can only fail if timestamps are wrong
        assert rec.scheduled_ns <= rec.sent_ns <= t.recv_ns
        assert len(rec.chunk_ns) == len(t.chunk_ns) == tokens
        assert all(c >= s for c, s in zip(rec.chunk_ns, t.chunk_ns))
        assert rec.output_tokens == tokens and rec.output_tokens_source == "usage"
        true_ttft = t.chunk_ns[0] - t.recv_ns
        true_ttfts.append(true_ttft / 1e6)
        # closed loop: TTFT from the send (the first wave's own dispatch is not the server's)
        assert not rec.open_loop and ttft_ms(rec) == (rec.first_token_ns - rec.sent_ns) / 1e6
        ttft_err.append(ttft_ms(rec) - true_ttft / 1e6)
        itl_err.extend((np.diff(rec.chunk_ns) - np.diff(t.chunk_ns)) / 1e6)
    assert min(ttft_err) >= 0
    # the server answers on schedule, never early
    assert np.median(true_ttfts) >= TTFT_MS - 1.5
    return {"p50": float(np.percentile(ttft_err, 50)), "p99": float(np.percentile(ttft_err, 99)),
            "itl_err_median": float(abs(np.median(itl_err))),
            # the summary's TTFT must be the server's own, within the error
            "summary_ttft_off": abs(result.summary["ttft_ms"]["p50"] - np.median(true_ttfts))}


@pytest.mark.parametrize("concurrency,n,p50_tol_ms,p99_tol_ms", [(1, 8, 2.0, 10.0),
                                                                  (256, 256, 10.0, 40.0)])
def test_ttft_and_itl_match_server_truth(server, tmp_path, concurrency, n, p50_tol_ms,
                                         p99_tol_ms):
    tokens = 16
    attempts = []
    # A shared 2-core box can stall either process for a moment (a 1.8 s stall of every request
    # was seen at load average 10); one re-run keeps such a stall from failing the test, while
    # a client that is really slow fails both runs.
    for attempt in range(2):
        result, truth = _run(server, tmp_path / str(attempt), concurrency, n, tokens)
        fig = _check(result, truth, n, tokens)
        attempts.append(fig)
        if (fig["p50"] <= p50_tol_ms and fig["p99"] <= p99_tol_ms and fig["itl_err_median"] <= 1
                and fig["summary_ttft_off"] <= p99_tol_ms):
            return
    pytest.fail(f"TTFT/ITL error over tolerance in both runs: {attempts}")
