"""Failures against the fake server: counted by kind, kept out of latency, none dropped."""

from __future__ import annotations

import socket

import pytest
from fakeserver import FakeServer

from latscope.errors import TargetError
from latscope.load import BenchConfig, read_run, run_bench


def _bench(url: str, tmp_path, n: int = 9, **kw):
    # every slot at once (no stagger, so no ramp of warm-up requests): the server's every Nth
    # request is then the run's every Nth measured one
    kw.setdefault("stagger", False)
    config = BenchConfig(url=url, num_requests=n, concurrency=3, output_dir=tmp_path / "run",
                         **kw)
    config.workload.output_len = "4"
    return run_bench(config)


@pytest.mark.parametrize("mode,kind", [("http500", "http_5xx"), ("http400", "http_4xx"),
                                       ("malformed", "malformed_response")])
def test_every_third_request_fails_by_kind(tmp_path, mode, kind):
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=3, fail_mode=mode) as srv:
        result = _bench(srv.url, tmp_path)
    s = result.summary
    assert s["errors"] == {kind: 3}
    assert s["requests"] == {"total": 9, "completed": 6, "failed": 3, "warmup_excluded": 0}
    assert s["ttft_ms"]["count"] == 6 and s["e2e_ms"]["count"] == 6
    _, records, summary = read_run(result.run_dir)
    assert len(records) == 9 and summary["errors"] == {kind: 3}
    assert all(r.error for r in records if not r.ok)


def test_connection_reset_mid_stream_is_a_connection_error(tmp_path):
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=3, fail_mode="reset") as srv:
        result = _bench(srv.url, tmp_path)
    s = result.summary
    # a reset before any byte arrived on a reused connection is retried once (as HTTP clients
    # do), so the server may see an extra request; every request is accounted for either way
    assert s["requests"]["total"] == 9
    assert s["errors"].get("connection", 0) >= 1
    assert set(s["errors"]) == {"connection"}
    assert s["requests"]["completed"] + s["errors"]["connection"] == 9


def test_timeout(tmp_path):
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=2, fail_mode="hang") as srv:
        result = _bench(srv.url, tmp_path, n=4, request_timeout_s=0.5)
    assert result.summary["errors"] == {"timeout": 2}
    assert result.summary["requests"]["completed"] == 2


def test_unreachable_server_is_one_clear_error(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TargetError, match="cannot reach"):
        _bench(f"http://127.0.0.1:{port}", tmp_path)


@pytest.mark.slow
def test_ctrl_c_keeps_everything_and_marks_in_flight_cancelled(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "run"
    with FakeServer(ttft_ms=20, itl_ms=20) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "latscope", "bench", "--url", srv.url, "-n", "1000", "-c", "4",
             "--output-len", "10", "--output-dir", str(run_dir), "--no-progress",
             "--scrape-interval", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # a shell's background job inherits SIGINT ignored; make Ctrl-C reach the child
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        requests = run_dir / "requests.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
                not requests.exists() or len(requests.read_text().splitlines()) < 8):
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    _, records, summary = read_run(run_dir)
    warm = summary["requests"]["warmup_excluded"]  # the stagger's ramp, on disk as warm-up
    assert len(records) >= 8 and summary["requests"]["total"] + warm == len(records)
    assert summary["errors"] == {"cancelled": 4}  # the 4 in flight, written, not dropped


def test_a_timeout_is_noticed_within_a_tick_and_the_watchdog_stops_with_the_requests():
    # one watchdog for every request in flight replaced a timer per request: a request past its
    # deadline must still fail about then (at most a tick, timeout / 20 here, late), and a
    # client with nothing in flight must not keep a timer running
    import asyncio
    import time

    from latscope.load.client import StreamingClient
    from latscope.model import RequestRecord

    async def run(url: str) -> list[tuple[str | None, float]]:
        client = StreamingClient(url, "/v1/completions", {}, timeout_s=0.4)
        body = (b'{"model":"fake-model","prompt":"hi","max_tokens":2,"stream":true}')

        async def one(i: int) -> tuple[str | None, float]:
            record = RequestRecord(index=i, request_id=f"t-{i}",
                                   scheduled_ns=time.perf_counter_ns())
            exchange = await client.execute(body, record)
            return exchange.error_kind, (time.perf_counter_ns() - record.scheduled_ns) / 1e9

        outcomes = await asyncio.gather(*(one(i) for i in range(4)))
        await asyncio.sleep(0.1)  # a tick past the last request
        assert client._watchdog is None and not client._deadlines
        client.close()
        return outcomes

    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=2, fail_mode="hang") as srv:
        outcomes = asyncio.run(run(srv.url))
    hung = [took for kind, took in outcomes if kind == "timeout"]
    assert len(hung) == 2 and sum(kind is None for kind, _ in outcomes) == 2
    assert all(0.4 <= took < 0.4 + 0.02 + 0.25 for took in hung), hung
