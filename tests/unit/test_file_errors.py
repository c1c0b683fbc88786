"""Files that cannot be read or written give a one-line cause and exit 1, before any report is
printed, and never leave half a file (latscope issue #14: PermissionError, IsADirectoryError,
FileNotFoundError and UnicodeDecodeError tracebacks before)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import tracefiles

from latscope.cli import output
from latscope.cli.main import main
from latscope.errors import ConfigError, TraceFormatError
from latscope.load.config import load_workload_file
from latscope.load.workload import _read_dataset
from latscope.trace.readers import read_trace

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOT_UTF8 = b"\xff\xfe\x00bad \x80\x81 bytes"


def _one_line_error(capsys, *, stdout_empty: bool = True) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    if stdout_empty:
        assert captured.out == ""  # failed before any report was printed
    return lines[0]


@pytest.mark.skipif(ROOT, reason="root reads files whatever their mode")
def test_trace_on_a_file_without_read_permission(tmp_path, capsys):
    path = tracefiles.kineto(tmp_path, tracefiles.good_rows(True))
    path.chmod(0)
    assert main(["trace", str(path), "-o", str(tmp_path / "o.json")]) == 1
    assert "Permission denied" in _one_line_error(capsys)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_trace_on_a_file_that_fails_to_read(tmp_path, capsys):
    """/proc/self/mem: a regular file whose first read fails (EIO), even for root."""
    assert main(["trace", "/proc/self/mem", "-o", str(tmp_path / "o.json")]) == 1
    line = _one_line_error(capsys)
    assert "cannot read file" in line and "/proc/self/mem" in line


@pytest.mark.skipif(ROOT, reason="root lists folders whatever their mode")
def test_trace_on_a_folder_without_read_permission(tmp_path, capsys):
    folder = tracefiles.rocprofv3_csv(tmp_path, tracefiles.good_rows(False))
    folder.chmod(0)
    try:
        assert main(["trace", str(folder), "-o", str(tmp_path / "o.json")]) == 1
        assert "Permission denied" in _one_line_error(capsys)
    finally:
        folder.chmod(0o755)


def test_unreadable_folder_is_named_as_such(tmp_path, monkeypatch):
    """The same as the test above, for root: the OS refusing to list the folder."""
    folder = tracefiles.rocprofv3_csv(tmp_path, tracefiles.good_rows(False))

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("latscope.trace.readers.os.listdir", refuse)
    with pytest.raises(TraceFormatError, match="cannot read folder: Permission denied"):
        read_trace(folder)


def test_trace_run_directory_that_cannot_be_made(tmp_path, capsys):
    path = tracefiles.kineto(tmp_path, tracefiles.good_rows(True))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["trace", str(path), "-o", str(blocker / "run")]) == 1
    assert "cannot create output dir" in _one_line_error(capsys)


def test_logs_json_is_stdout_only_and_the_run_directory_has_it(fixtures_dir, tmp_path,
                                                               capsys):
    import json

    log = fixtures_dir / "vllm" / "cpu-vllm0.32" / "server.log"
    assert main(["logs", str(log), "--json", "-o", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == json.loads((tmp_path / "run" / "log.json").read_text())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["kind"] == "logs" and manifest["status"] == "ok"


def test_logs_on_a_folder(tmp_path, capsys):
    assert main(["logs", str(tmp_path)]) == 1
    assert "is a folder" in _one_line_error(capsys)


def test_doctor_and_net_outputs_that_cannot_be_made_fail_before_probing(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["doctor", "-o", str(blocker / "run")]) == 1
    assert "cannot create output dir" in _one_line_error(capsys)
    assert main(["doctor", "--collect", str(tmp_path / "missing" / "c.tar.gz")]) == 1
    assert _one_line_error(capsys).startswith("error: --collect ")
    # port 9 (discard) on 127.0.0.1: nothing is sent, the check comes first
    assert main(["net", "--url", "http://127.0.0.1:9", "-o", str(blocker / "run")]) == 1
    assert "cannot create output dir" in _one_line_error(capsys)


def test_a_failed_write_leaves_no_half_file(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_bytes(b'{"old": "complete"}')

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output.os, "replace", fail)
    with pytest.raises(ConfigError, match="No space left on device"):
        output.write_atomic(target, b'{"new": ' + b"1" * 100_000 + b"}", "-o")
    assert target.read_bytes() == b'{"old": "complete"}'
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # the temporary file is gone


def test_atomic_write_keeps_the_usual_file_mode(tmp_path):
    target = tmp_path / "out.json"
    output.write_atomic(target, b"{}", "-o")
    mask = os.umask(0o022)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_dataset_that_is_not_text(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(NOT_UTF8)
    with pytest.raises(ConfigError, match="not UTF-8 text") as err:
        _read_dataset(path, "auto")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["w.toml", "w.yaml"])
def test_workload_file_that_is_not_text(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(NOT_UTF8)
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_workload_file(path)


def test_workload_file_that_is_a_folder(tmp_path):
    with pytest.raises(ConfigError, match="cannot read workload file"):
        load_workload_file(Path(tmp_path))
