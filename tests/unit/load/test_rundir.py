"""The run directory: secrets never written, records re-readable, crash-truncated lines tolerated."""

from __future__ import annotations

import pytest
from fakeserver import FakeServer

from latscope.errors import ConfigError
from latscope.load import BenchConfig, read_run, run_bench
from latscope.model import RequestRecord

SECRET = "sk-test-do-not-leak-123"


def test_run_dir_roundtrip_and_no_secret(tmp_path):
    with FakeServer(ttft_ms=2, itl_ms=1) as srv:
        config = BenchConfig(url=srv.url + "/v1", num_requests=6, concurrency=2, warmup=2,
                             api_key=SECRET, output_dir=tmp_path / "run", endpoint="chat",
                             slo={"ttft": 1000})
        config.workload.output_len = "5"
        result = run_bench(config)
    manifest, records, summary = read_run(result.run_dir)
    assert summary == result.summary
    assert [r.request_id for r in records] == [r.request_id for r in result.records]
    assert sum(r.warmup for r in records) == 2 and len(records) == 8
    assert records[-1].chunk_ns == result.records[-1].chunk_ns
    assert manifest["model"] == "fake-model" and manifest["config"]["api_key"] == "<set>"
    assert manifest["start_ns"] <= min(r.scheduled_ns for r in records if not r.warmup)
    for path in result.run_dir.iterdir():
        assert SECRET not in path.read_text(), path
    assert summary["goodput"]["good_requests"] == 6


def test_truncated_last_line_is_skipped_but_other_damage_is_an_error(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    line = RequestRecord(index=0, request_id="a", scheduled_ns=1).to_dict()
    import json

    good = json.dumps(line)
    (tmp_path / "requests.jsonl").write_text(good + "\n" + good[:20])
    _, records, summary = read_run(tmp_path)
    assert len(records) == 1 and summary == {}
    (tmp_path / "requests.jsonl").write_text(good[:20] + "\n" + good + "\n")
    with pytest.raises(ConfigError, match="requests.jsonl: line 1 is not JSON"):
        read_run(tmp_path)


def test_not_a_run_dir(tmp_path):
    with pytest.raises(ConfigError, match="not a latscope run directory"):
        read_run(tmp_path)


def test_reused_output_dir_holds_only_the_new_run(tmp_path):
    from latscope.rundir import RunWriter

    first = RunWriter(tmp_path)
    first.write_manifest({"run_tag": "old"})
    first.append(RequestRecord(index=0, request_id="old-0", scheduled_ns=1))
    first.write_summary({"old": True})
    first.close()
    second = RunWriter(tmp_path)
    second.write_manifest({"run_tag": "new"})
    second.append(RequestRecord(index=0, request_id="new-0", scheduled_ns=2))
    second.close()  # e.g. killed before its summary was written
    manifest, records, summary = read_run(tmp_path)
    assert manifest["run_tag"] == "new" and [r.request_id for r in records] == ["new-0"]
    assert summary == {}  # not the earlier run's summary


def test_url_password_is_not_written_to_the_manifest():
    from latscope.load import BenchConfig

    public = BenchConfig(url="http://alice:s3cret@127.0.0.1:8000", api_key="sk-x").public_dict()
    assert "s3cret" not in str(public) and "sk-x" not in str(public)
    assert "alice" in public["url"] and "127.0.0.1:8000" in public["url"]
