from latscope.findings.rank import sort_findings
from latscope.model import Evidence, Finding, RequestRecord, Severity


def test_request_record_round_trip_keeps_every_field():
    rec = RequestRecord(index=3, request_id="r3", scheduled_ns=10, sent_ns=12, chunk_ns=[20, 30],
                        output_tokens=2, output_tokens_source="usage", server={"queue": 0.1})
    again = RequestRecord.from_dict(rec.to_dict())
    assert again == rec
    assert not rec.ok  # no end_ns yet


def test_a_records_line_reads_back_from_either_form_of_its_token_times(tmp_path):
    # requests.jsonl holds token times as gaps since schema 2 (rundir.record_line); a run
    # directory of schema 1 held them as times, and must read back the same
    import dataclasses

    import orjson
    import pytest

    from latscope.rundir import RunDir, read_run, record_line

    times = [10**13, 10**13, 10**13 + 4_000_000, 10**13 + 4_000_000, 10**13 + 9_500_000]
    rec = RequestRecord(index=0, request_id="r0", scheduled_ns=10**13 - 5, sent_ns=10**13 - 4,
                        first_token_ns=times[0], end_ns=times[-1], chunk_ns=times, status=200)
    new, old = orjson.loads(record_line(rec)), rec.to_dict()
    assert new["chunk_gaps_ns"] == [10**13, 0, 4_000_000, 0, 5_500_000] and "chunk_ns" in old
    assert RequestRecord.from_dict(new) == RequestRecord.from_dict(old) == rec
    for version, line in ((1, orjson.dumps(old) + b"\n"), (2, record_line(rec))):
        run = tmp_path / f"v{version}"
        RunDir.create("bench", run)
        manifest = orjson.loads((run / "manifest.json").read_bytes())
        (run / "manifest.json").write_bytes(orjson.dumps({**manifest, "schema_version": version}))
        (run / "requests.jsonl").write_bytes(line)
        assert read_run(run)[1] == [rec]
        # the passes after a run read it a line at a time, token times unread: alike too
        from latscope.load.summary import rebuild_summary
        from latscope.rundir import iter_records

        light = [dataclasses.replace(rec, chunk_ns=[])]
        assert list(iter_records(run, token_times=False)) == light
        itl = rebuild_summary(run)["itl_ms"]
        assert (itl["count"], itl["max"]) == (4, pytest.approx(5.5))
    # gaps that do not add up, or a record without its index: one line naming the file
    import pytest

    from latscope.errors import ConfigError

    for bad in (record_line(rec).replace(b"[10000000000000,0,", b'[10000000000000,"x",'),
                record_line(rec).replace(b'"index":0,', b"")):
        (run / "requests.jsonl").write_bytes(bad + record_line(rec))
        with pytest.raises(ConfigError, match="requests.jsonl: request .* is not a request record"):
            read_run(run)


def test_findings_sort_by_severity_then_measured_share():
    a = Finding("a", Severity.WARNING, "a", impact={"share": 0.1})
    b = Finding("b", Severity.WARNING, "b", impact={"share": 0.5})
    c = Finding("c", Severity.CRITICAL, "c")
    d = Finding("d", Severity.OK, "d")
    assert [f.id for f in sort_findings([d, a, b, c])] == ["c", "b", "a", "d"]


def test_finding_round_trip():
    f = Finding("host.numa", Severity.CRITICAL, "t", [Evidence("x", 1, "ms", "/proc/x")],
                why="w", fix="f", reference="r", layer="host", impact={"share": 0.2})
    assert Finding.from_dict(f.to_dict()) == f
