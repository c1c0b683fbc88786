from latscope.findings.rank import sort_findings
from latscope.model import Evidence, Finding, RequestRecord, Severity


def test_request_record_round_trip_keeps_every_field():
    rec = RequestRecord(index=3, request_id="r3", scheduled_ns=10, sent_ns=12, chunk_ns=[20, 30],
                        output_tokens=2, output_tokens_source="usage", server={"queue": 0.1})
    again = RequestRecord.from_dict(rec.to_dict())
    assert again == rec
    assert not rec.ok  # no end_ns yet


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
