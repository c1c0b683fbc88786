"""The target's PID file: running, stale (server gone, corrupt file, PID reused) and cleaned, with
real processes standing in for the server; plus LocalTarget's argument errors and the CLI's
answers when nothing runs. The real vLLM path is in tests/integration/test_target.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from latscope.cli.main import main
from latscope.errors import TargetError
from latscope.server.process import ProcessIdentity, process_start_ticks
from latscope.server.target import (
    LocalTarget, TargetRecord, default_pid_file, read_record, stop_recorded, target_state,
    write_record,
)


@pytest.fixture
def pid_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return default_pid_file()


@pytest.fixture
def sleeper():
    """A process in its own session, as `target up` leaves vLLM; it echoes each line it reads,
    to show that it still runs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfor line in sys.stdin: print(line, end='', flush=True)"],
        start_new_session=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.wait()


def _record(identity: ProcessIdentity) -> TargetRecord:
    return TargetRecord(pid=identity.pid, pgid=identity.pgid, start_ticks=identity.start_ticks,
                        url="http://127.0.0.1:9", model_name="tiny-llama", log_path="/x.log",
                        tokenizer_dir="/m", started_at=time.time())


def test_pid_file_lives_in_the_runtime_dir(pid_file, tmp_path):
    assert pid_file == tmp_path / "latscope" / "target.json"
    assert target_state(pid_file).state == "none"


def test_live_group_is_running_and_down_stops_it(pid_file, sleeper):
    write_record(pid_file, _record(ProcessIdentity.of(sleeper.pid)))
    assert read_record(pid_file).pid == sleeper.pid
    state = target_state(pid_file)
    assert state.state == "running" and not state.healthy  # nothing answers /health on port 9
    assert stop_recorded(pid_file, grace=5).state == "running"
    assert sleeper.wait(timeout=5) is not None
    assert not pid_file.exists()


def test_dead_server_makes_a_stale_file_that_down_removes(pid_file):
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    identity = ProcessIdentity(proc.pid, proc.pid, process_start_ticks(proc.pid))
    proc.wait()
    write_record(pid_file, _record(identity))
    assert target_state(pid_file).state == "stale"
    assert stop_recorded(pid_file).state == "stale"
    assert not pid_file.exists()


def test_reused_pid_is_stale_and_left_alone(pid_file, sleeper):
    identity = ProcessIdentity.of(sleeper.pid)
    write_record(pid_file, _record(ProcessIdentity(identity.pid, identity.pgid,
                                                   identity.start_ticks + 1)))
    assert stop_recorded(pid_file, grace=1).state == "stale"
    # the unrelated process with that PID was not signalled: a SIGTERM or SIGKILL sent would be
    # pending in it now and kill it before it echoed another line (a fixed 0.2 s sleep stood here)
    sleeper.stdin.write("still here?\n")
    sleeper.stdin.flush()
    assert sleeper.stdout.readline() == "still here?\n"


def test_corrupt_pid_file_reads_as_stale(pid_file):
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text("{not json")
    assert target_state(pid_file).state == "stale"
    stop_recorded(pid_file)
    assert not pid_file.exists()


def test_cli_status_and_down_when_nothing_runs(pid_file, capsys):
    assert main(["target", "status"]) == 3
    assert "not running" in capsys.readouterr().out
    assert main(["target", "down"]) == 0
    assert "no target running" in capsys.readouterr().out


def test_cli_down_removes_a_stale_file(pid_file, capsys):
    write_record(pid_file, _record(ProcessIdentity(2 ** 22 + 1, 2 ** 22 + 1, 1)))  # > pid_max
    assert main(["target", "status"]) == 3
    assert "stale PID file" in capsys.readouterr().out
    assert main(["target", "down"]) == 0
    assert "removed a stale PID file" in capsys.readouterr().out
    assert not pid_file.exists()


def test_cli_up_refuses_a_second_target(pid_file, sleeper, capsys):
    write_record(pid_file, _record(ProcessIdentity.of(sleeper.pid)))
    assert main(["target", "up"]) == 1
    assert "already running at http://127.0.0.1:9" in capsys.readouterr().err
    assert sleeper.poll() is None and pid_file.exists()  # the running one is left as it was


def test_cli_rejects_bad_env_pair(pid_file, capsys):
    assert main(["target", "up", "--env", "NOEQUALS"]) == 1
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_local_target_rejects_a_model_that_is_not_there(tmp_path):
    with pytest.raises(TargetError, match="not 'tiny', 'tiny-dummy' or a local model directory"):
        LocalTarget(model=tmp_path / "nope", log_dir=tmp_path).start()


def test_local_target_rejects_a_busy_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(TargetError, match=f"port {port} on 127.0.0.1 is already in use"):
            LocalTarget(port=port, model="tiny-dummy", log_dir=tmp_path).start()


def test_bench_against_the_background_target_receives_its_spans(pid_file, sleeper, tmp_path):
    # `target up` records where its vLLM exports spans; a later `bench --url` against it binds
    # that address and sends traceparents, with no flag (it once got no per-request join)
    import json

    from fakeserver import FakeServer

    from latscope.cli.target import _otlp_endpoint
    from latscope.server.target import recorded_otlp_listen

    endpoint = _otlp_endpoint("127.0.0.1:0")
    listen = endpoint.removeprefix("http://").removesuffix("/v1/traces")
    assert endpoint.endswith("/v1/traces") and not listen.endswith(":0")
    with FakeServer(ttft_ms=1, itl_ms=1) as srv:
        record = _record(ProcessIdentity.of(sleeper.pid))
        record.url, record.otlp_listen = srv.url, listen
        write_record(pid_file, record)
        assert recorded_otlp_listen(srv.url + "/v1") == listen
        assert recorded_otlp_listen("http://127.0.0.1:1") is None  # another server
        out = tmp_path / "run"
        rc = main(["bench", "--url", srv.url, "-n", "2", "-c", "1", "--output-len", "2",
                   "--no-progress", "--scrape-interval", "0", "--output-dir", str(out)])
    assert rc == 0
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert records and all(r["trace_id"] for r in records)  # traceparent sent with each
    sleeper.kill()
    sleeper.wait()
    assert recorded_otlp_listen(srv.url) is None  # the target is gone: nothing to receive
