"""Every verb writes the same kind of run directory: a manifest with schema_version and kind, its
own data file and a findings.json that validates against the one Finding schema; `latscope show`
re-renders each from disk, at 80 columns, and refuses a directory of an unknown schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from latscope.cli.main import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakeserver
from fakeserver import FakeServer  # noqa: E402

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "src" / "latscope" / "findings"
                     / "schema.json").read_text())
CAPTURE = Path(__file__).parent / "env" / "data" / "h200_collect.tar.gz"


def _check(run: Path, kind: str, data_file: str) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["schema_version"] == 2 and manifest["kind"] == kind
    assert manifest["status"] == "ok" and manifest["ended"]
    assert manifest["command"].startswith("latscope ")
    assert (run / data_file).is_file()
    jsonschema.validate(json.loads((run / "findings.json").read_text()), SCHEMA)


def _show(run: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    return out


def test_logs_trace_doctor_and_net_write_run_directories_show_rerenders(
        fixtures_dir, traces_dir, tmp_path, capsys):
    log = fixtures_dir / "vllm" / "h200-vllm0.26" / "server.log"
    trace = traces_dir / "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz"
    with FakeServer(ttft_ms=5.0, itl_ms=1.0) as server:
        runs = {
            "logs": (["logs", str(log)], "log.json"),
            "trace": (["trace", str(trace), "--quiet"], "trace.json"),
            "doctor": (["doctor", "--root", str(CAPTURE)], "doctor.json"),
            "net": (["net", "--url", server.url, "-n", "4", "--stream-requests", "1"],
                    "net.json"),
        }
        for kind, (argv, data_file) in runs.items():
            run = tmp_path / kind
            assert main([*argv, "-o", str(run)]) == 0, kind
            _check(run, kind, data_file)
            out = _show(run, capsys)
            assert f"{kind} run" in out
            findings = json.loads((run / "findings.json").read_text())["findings"]
            shown = [f for f in findings if f["severity"] in ("critical", "warning")]
            for f in shown:  # what needs acting on is shown again, from disk alone
                assert f["title"].split()[0] in out


def test_json_flag_prints_the_result_and_nothing_else(fixtures_dir, tmp_path, capsys):
    log = fixtures_dir / "vllm" / "cpu-vllm0.32" / "server.log"
    assert main(["logs", str(log), "--json", "-o", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["log"]["config"]  # the whole of stdout is one JSON document


def test_show_rebuilds_a_killed_bench_and_refuses_unknown_schemas(tmp_path, capsys):
    with FakeServer(ttft_ms=2.0, itl_ms=1.0) as server:
        assert main(["bench", "--url", server.url, "-n", "6", "-c", "2", "--no-progress",
                     "--scrape-interval", "0", "--output-dir", str(tmp_path / "b")]) == 0
    (tmp_path / "b" / "summary.json").unlink()  # as after a SIGKILL
    out = _show(tmp_path / "b", capsys)
    assert "rebuilt from requests.jsonl" in out
    manifest = tmp_path / "b" / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "schema_version": 99}))
    assert main(["show", str(tmp_path / "b")]) == 2  # `report --format text`'s exit
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "schema_version 99" in err[0]


def test_record_lines_are_orjsons_and_reach_the_file_within_the_flush_bound(tmp_path, monkeypatch):
    # records are buffered and written out at least every _FLUSH_NS (a write each cost ~2.5 us
    # of a response at the client's ceiling); the line is orjson's, its token times as gaps
    # (written by the C part where it is built), and it reads back as the record
    import orjson

    from latscope import rundir
    from latscope.model import RequestRecord

    t = 10**13
    times = [t] * 5 + [t + 9] * 5 + [t + 20]
    record = RequestRecord(index=3, request_id="r-3", scheduled_ns=t, sent_ns=t, end_ns=t + 20,
                           first_token_ns=t, chunk_ns=times, output_tokens=11, status=200)
    line = orjson.loads(rundir.record_line(record))
    assert line["chunk_gaps_ns"] == [t, 0, 0, 0, 0, 9, 0, 0, 0, 0, 11] and "chunk_ns" not in line
    assert {k: v for k, v in line.items() if k != "chunk_gaps_ns"} == {
        k: v for k, v in record.to_dict().items() if k != "chunk_ns"}
    assert RequestRecord.from_dict(line) == record
    assert record.chunk_ns is times
    monkeypatch.setattr(rundir, "_FLUSH_NS", 10**12)  # nothing due while the test runs
    writer = rundir.RunWriter(tmp_path / "run")
    path = tmp_path / "run" / rundir.REQUESTS
    writer.append(record)
    assert path.read_bytes() == b""  # buffered
    monkeypatch.setattr(rundir, "_FLUSH_NS", 0)
    writer.flush_if_due()
    assert RequestRecord.from_dict(orjson.loads(path.read_bytes())) == record
    monkeypatch.setattr(rundir, "_FLUSH_NS", 10**12)
    writer.append(record)
    writer.close()  # a stopped run loses nothing
    assert len(path.read_bytes().splitlines()) == 2
    # past _RECORD_BUFFER bytes the lines go out whatever the time: memory stays bounded
    monkeypatch.setattr(rundir, "_RECORD_BUFFER", 3 * len(rundir.record_line(record)))
    writer = rundir.RunWriter(tmp_path / "run2")
    path = tmp_path / "run2" / rundir.REQUESTS
    for _ in range(2):
        writer.append(record)
    assert path.read_bytes() == b""
    writer.append(record)
    assert len(path.read_bytes().splitlines()) == 3
    # lines that do not fit what is left: the kept ones go first, then these, in order; a
    # worker's batch larger than the whole buffer is written at once
    line = rundir.record_line(record)
    writer.append_lines(b"a" + line[1:])
    writer.append_lines(b"b" + line[1:])
    writer.append_lines(b"c" + line[1:] * 2)  # no room: a and b go out, c is kept
    assert path.read_bytes().splitlines()[3:] == [b"a" + line[1:-1], b"b" + line[1:-1]]
    writer.append_lines(b"d" + line[1:] * 4)  # c goes out, then d
    assert [x[:1] for x in path.read_bytes().splitlines()[5:]] == [b"c", b'"', b"d"] + [b'"'] * 3
    writer.append_lines(b"e" + line[1:])
    writer.close()
    assert path.read_bytes().splitlines()[-1] == b"e" + line[1:-1]
