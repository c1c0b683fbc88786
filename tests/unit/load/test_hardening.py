"""Bad servers, stops and secrets: every run ends, says why in one line, keeps what it gathered,
and never shows or stores a password (issue #14, load side)."""

from __future__ import annotations

import base64
import json
import signal
import socket
import subprocess
import sys
import time

import pytest
from fakeserver import FakeServer

from latscope.cli.main import main
from latscope.errors import ConfigError
from latscope.load import BenchConfig, read_run, run_bench
from latscope.load.runner import rebuild_summary


def _config(url: str, tmp_path, n: int = 6, **kw) -> BenchConfig:
    config = BenchConfig(url=url, num_requests=n, concurrency=2, output_dir=tmp_path / "run",
                         model="fake-model", **kw)
    config.workload.output_len = "4"
    return config


def _cli(url: str, out, *extra: str) -> list[str]:
    return ["bench", "--url", url, "--model", "fake-model", "-c", "2", "--output-len", "4",
            "--no-progress", "--scrape-interval", "0", "--output-dir", str(out), *extra]


@pytest.mark.parametrize("mode, message", [
    ("badlength", "bad Content-Length header 'abc'"),
    ("longhead", "HTTP response head over 64 KiB"),
])
def test_a_broken_response_head_is_named_and_the_run_exits_1(tmp_path, capsys, mode, message):
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=1, fail_mode=mode) as srv:
        rc = main(_cli(srv.url, tmp_path / "run", "-n", "4"))
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("error: all 4 requests failed (malformed_response 4)") and message in err
    assert "Traceback" not in err and err.count("\n") == 1
    _, records, summary = read_run(tmp_path / "run")
    # 4 measured, and before them the stagger's ramp (warm-up requests), every one failed
    assert sum(not r.warmup for r in records) == 4 and all(message in r.error for r in records)
    assert summary["requests"]["warmup_excluded"] == len(records) - 4
    assert summary["error_examples"]["malformed_response"].startswith(message)


def test_a_response_over_the_size_limit_is_cut_and_counted(tmp_path):
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=2, fail_mode="huge") as srv:
        result = run_bench(_config(srv.url, tmp_path, n=4, max_response_bytes=1 << 20))
    s = result.summary
    assert s["errors"] == {"malformed_response": 2} and s["requests"]["completed"] == 2
    assert "larger than the limit" in s["error_examples"]["malformed_response"]


@pytest.mark.parametrize("mode", ["http500", "reset"])
def test_a_run_where_every_request_fails_exits_1_and_says_why(tmp_path, capsys, mode):
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=1, fail_mode=mode) as srv:
        rc = main(_cli(srv.url, tmp_path / "run", "-n", "4"))
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: all 4 requests failed (")
    assert "http_5xx 4" in err if mode == "http500" else "connection 4" in err


def test_connection_refused_with_a_given_model_exits_1(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(_cli(f"http://127.0.0.1:{port}", tmp_path / "run", "-n", "3"))
    err = capsys.readouterr().err
    assert rc == 1 and "all 3 requests failed (connection 3); first: connect failed" in err


@pytest.mark.slow
def test_duration_bounds_a_run_against_a_server_that_stalls(tmp_path):
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=1, fail_mode="stall") as srv:
        config = _config(srv.url, tmp_path, n=0, duration_s=1.0)
        config.num_requests = None
        result = run_bench(config)
        elapsed = time.time() - result.manifest["start_wall"]  # from the measured phase's start
    # 1 s of load + 1 s of grace (min(duration, 30 s)), not the 600 s request timeout
    assert 2.0 <= elapsed < 10, elapsed
    s = result.summary
    # slot 0's first request (the stagger's pilot: the ramp, warm-up) and slot 1's, which
    # stopped waiting for it and began the measurement: both stalled, written as cancelled
    assert s["errors"] == {"cancelled": 1} and s["requests"]["completed"] == 0
    assert s["requests"]["warmup_excluded"] == 1
    assert "after --duration ended" in s["error_examples"]["cancelled"]
    assert [r.error_kind for r in read_run(result.run_dir)[1]] == ["cancelled"] * 2


@pytest.mark.slow
def test_duration_against_a_healthy_server_finishes_what_is_in_flight(tmp_path):
    with FakeServer(ttft_ms=5, itl_ms=5) as srv:
        config = _config(srv.url, tmp_path, duration_s=0.5)
        config.num_requests = None
        result = run_bench(config)
    s = result.summary
    assert s["requests"]["completed"] > 10 and s["errors"] == {}


def test_prompt_longer_than_the_models_context_is_refused_before_building(tmp_path):
    with FakeServer(ttft_ms=1, itl_ms=1) as srv:  # it states max_model_len 4096
        config = _config(srv.url, tmp_path, n=2)
        config.workload.input_len = "100000000"
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match="max_model_len.* is 4096"):
            run_bench(config)
    assert time.monotonic() - t0 < 10  # once: 10 GB and 61 s of prompt building


def test_a_tokenize_endpoint_with_an_endless_header_falls_back_and_says_why(tmp_path):
    with FakeServer(ttft_ms=1, itl_ms=1, tokenize_mode="longhead") as srv:
        result = run_bench(_config(srv.url, tmp_path, n=2))
    notes = result.summary["workload"]["notes"]
    assert result.summary["requests"]["completed"] == 2
    assert any("/tokenize" in n and "LineTooLong" in n for n in notes), notes


def test_url_credentials_go_as_basic_auth_and_are_never_shown_or_stored(tmp_path, capsys):
    with FakeServer(ttft_ms=1, itl_ms=1) as srv:
        url = srv.url.replace("http://", "http://alice:s%40cret@")
        result = run_bench(_config(url, tmp_path, n=2))
        truth = srv.truth()
    expected = "Basic " + base64.b64encode(b"alice:s@cret").decode()
    assert {t.authorization for t in truth.values()} == {expected}
    for name in ("manifest.json", "summary.json", "requests.jsonl"):
        text = (result.run_dir / name).read_text()
        assert "cret" not in text and base64.b64encode(b"alice:s@cret").decode() not in text
    assert json.loads((result.run_dir / "manifest.json").read_text())["base_url"] == srv.url
    # unreachable: the one-line error shows the host, never the password
    rc = main(["bench", "--url", "http://bob:hunter2@127.0.0.1:9", "-n", "1", "--no-progress",
               "--output-dir", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: cannot reach http://127.0.0.1:9")
    assert "hunter2" not in err


def test_url_credentials_and_an_api_key_together_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="give one of them"):
        run_bench(_config("http://bob:pw@127.0.0.1:9", tmp_path, api_key="sk-x"))


def test_percent_signs_are_sent_as_they_are_and_crlf_in_a_header_is_refused(tmp_path):
    with FakeServer(ttft_ms=1, itl_ms=1) as srv:
        result = run_bench(_config(srv.url, tmp_path, n=2, api_key="k%s%d%%"))
        truth = srv.truth()
    assert result.summary["requests"]["completed"] == 2
    assert {t.authorization for t in truth.values()} == {"Bearer k%s%d%%"}
    assert {t.path for t in truth.values()} == {"/v1/completions"}
    with pytest.raises(ConfigError, match="CR, LF or NUL") as info:
        run_bench(_config(srv.url, tmp_path, n=1, api_key="sk-secret\r\nx-evil: 1"))
    assert "sk-secret" not in str(info.value)  # the value may be a secret: never echoed


def _bench_proc(url: str, run_dir) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "latscope", "bench", "--url", url, "-n", "1000", "-c", "4",
         "--output-len", "10", "--output-dir", str(run_dir), "--no-progress",
         "--scrape-interval", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_records(run_dir, count: int) -> None:
    requests = run_dir / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
            not requests.exists() or len(requests.read_text().splitlines()) < count):
        time.sleep(0.1)


@pytest.mark.slow
def test_sigterm_keeps_everything_like_ctrl_c(tmp_path):
    run_dir = tmp_path / "run"
    with FakeServer(ttft_ms=20, itl_ms=20) as srv:
        proc = _bench_proc(srv.url, run_dir)
        _wait_for_records(run_dir, 8)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in err, err
    _, records, summary = read_run(run_dir)
    warm = summary["requests"]["warmup_excluded"]  # the stagger's ramp, on disk as warm-up
    assert len(records) >= 8 and summary["requests"]["total"] + warm == len(records)
    assert summary["errors"] == {"cancelled": 4}  # the 4 in flight, written, not dropped


@pytest.mark.slow
def test_after_sigkill_the_summary_is_rebuilt_from_the_records(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with FakeServer(ttft_ms=20, itl_ms=20) as srv:
        proc = _bench_proc(srv.url, run_dir)
        _wait_for_records(run_dir, 8)
        proc.kill()
        proc.wait(timeout=30)
    _, records, summary = read_run(run_dir)
    assert summary == {}  # killed: no summary written
    rebuilt = rebuild_summary(run_dir)
    measured = sum(not r.warmup for r in records)  # the stagger's ramp is warm-up
    assert rebuilt["requests"]["total"] == measured and len(records) >= 8
    assert rebuilt["requests"]["warmup_excluded"] == len(records) - measured
    assert rebuilt["requests"]["completed"] == measured  # no in-flight record was written
    assert rebuilt["ttft_ms"]["count"] == measured and "rebuilt" in rebuilt
    assert rebuilt["load"]["concurrency"] == 4 and rebuilt["latency_origin"] == "sent"
    # `latscope show` prints it (through load.rundir.rebuild_summary)
    assert main(["show", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "rebuilt from requests.jsonl" in out and "TTFT" in out


def test_the_live_summary_equals_the_one_rebuilt_from_disk(tmp_path):
    # the run keeps no records in memory: its accumulators must agree with the records on disk
    with FakeServer(ttft_ms=2, itl_ms=1) as srv:
        config = _config(srv.url, tmp_path, n=30, slo={"ttft": 1000}, warmup=2)
        result = run_bench(config)
    live, rebuilt = result.summary, rebuild_summary(result.run_dir)
    for key in ("requests", "errors", "tokens", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms",
                "send_lag_ms", "duration_s", "throughput", "goodput", "load"):
        assert rebuilt[key] == live[key], key


def test_a_percent_in_the_url_path_is_sent_as_it_is():
    # the request head was once bytes-%-formatted: "%25" in a path raised ValueError per request
    from latscope.load.client import StreamingClient

    client = StreamingClient("http://127.0.0.1:8000/pre%25fix%d/v1", "/v1/completions",
                             {"x-note": "100%s"}, timeout_s=1.0)
    head = client.request_bytes("r-1", b"{}").split(b"\r\n")
    assert head[0] == b"POST /pre%25fix%d/v1/completions HTTP/1.1"
    assert b"x-note: 100%s" in head and b"content-length: 2" in head
    with pytest.raises(ConfigError, match="space, CR, LF or NUL"):
        StreamingClient("http://127.0.0.1:8000/a b", "/v1/completions", {}, timeout_s=1.0)


@pytest.mark.parametrize("extra", [("-c", "4"), ("--rate", "400")])
def test_a_full_disk_stops_the_run_with_one_line_and_exit_1(tmp_path, capsys, monkeypatch, extra):
    # requests.jsonl on /dev/full (every write: ENOSPC). The write fails in the callback that
    # parses finished responses, where an exception was only logged: the run went on sending,
    # its slots waited for a drain that never came, and it hung until killed
    import os

    from latscope import rundir

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    monkeypatch.setattr(rundir, "REQUESTS", "/dev/full")  # an absolute name: the run dir's / it
    monkeypatch.setattr(rundir, "_FLUSH_NS", 0)  # every record written at once
    import threading

    with FakeServer(ttft_ms=1, itl_ms=1) as srv:
        done: list[int] = []
        run = threading.Thread(target=lambda: done.append(
            main(_cli(srv.url, tmp_path / "run", "-n", "400", *extra))), daemon=True)
        run.start()
        run.join(120)  # a hang (as before) fails here rather than holding the suite
    err = capsys.readouterr().err
    assert done == [1], err[-500:]
    assert err.startswith("error: cannot write /dev/full: No space left on device")
    assert "Traceback" not in err and err.count("\n") == 1
