"""Impossible input, by kind, in every reader: events that cannot be real are dropped and counted
by reason, a trace left with no GPU activity is refused in one line, and no share outside 0-100 %
ever comes out of an analysis (latscope issue #14)."""

from __future__ import annotations

import json

import pytest
import tracefiles

from latscope.cli.main import main
from latscope.errors import TraceFormatError
from latscope.trace import model
from latscope.trace.analyze import analyze_trace, check_shares
from latscope.findings.trace import trace_findings
from latscope.trace.readers import read_trace

DAY_US, DAY_NS = 86_400e6, 86_400 * 10**9
# kind -> (bad chrome row (ts_us, dur_us), bad ns row (start, end), reason); None: not expressible
KINDS = {
    "negative_duration": ((10.0, -5.0), (20_000, 10_000), model.NEGATIVE_DURATION),
    "ts_1e17_us": ((1e17, 5.0), (2**62 + 1, 2**62 + 10), model.OUT_OF_RANGE),
    "dur_1e308": ((10.0, 1e308), (10, 1e308), model.OUT_OF_RANGE),
    "not_a_number": ((10.0, "abc"), ("abc", 10), model.NOT_A_NUMBER),
    "object_as_time": (({}, 5.0), None, model.NOT_A_NUMBER),
    "nan_text": ((10.0, "nan"), ("nan", 10), model.NOT_FINITE),
    "longer_than_a_day": ((10.0, 2 * DAY_US), (0, 2 * DAY_NS), model.TOO_LONG),
    "bare_string_entry": ("hello", None, model.NOT_AN_EVENT),
}
_JSON_FORMATS = ("kineto", "rocprof-v1-json", "rocprofv3-json")
_SQLITE = ("rocpd-sqlite", "nsys-sqlite")


def _bad_row(fmt: str, kind: str):
    chrome_row, ns_row, reason = KINDS[kind]
    chrome = tracefiles.WRITERS[fmt][1]
    row = chrome_row if chrome else ns_row
    if kind == "bare_string_entry":
        row = "hello" if fmt in _JSON_FORMATS else None
    if kind == "object_as_time" and fmt == "rocprofv3-json":
        row = ({}, 10)
    if kind == "nan_text" and fmt in _SQLITE:
        row = None  # SQLite stores NaN as NULL: that is the not_a_number case
    if fmt in _SQLITE and kind == "not_a_number":
        row = (None, 10)  # a NULL time; the "abc" text is tested for the other formats
    return row, reason


CASES = [(fmt, kind) for fmt in tracefiles.WRITERS for kind in KINDS
         if _bad_row(fmt, kind)[0] is not None]


def _write(tmp_path, fmt: str, rows):
    writer, _ = tracefiles.WRITERS[fmt]
    return writer(tmp_path, rows)


@pytest.mark.parametrize(("fmt", "kind"), CASES, ids=[f"{f}-{k}" for f, k in CASES])
def test_impossible_event_is_skipped_and_counted(tmp_path, fmt, kind):
    bad, reason = _bad_row(fmt, kind)
    chrome = tracefiles.WRITERS[fmt][1]
    path = _write(tmp_path, fmt, [*tracefiles.good_rows(chrome), bad])
    trace = read_trace(path)
    assert trace.meta.format == fmt
    assert len(trace.gpu) == 3
    assert trace.meta.skipped == {reason: 1}
    result = analyze_trace(trace)
    assert result.source.skipped == {reason: 1}
    b = result.devices[0].breakdown
    assert b.window_ns == 25_000 and b.compute_ns + b.idle_ns == 25_000
    assert any("skipped 1 event that cannot be real" in n for n in result.source.notes)
    skipped = [f for f in trace_findings(result) if f.id == "trace.skipped_events"]
    assert len(skipped) == 1 and reason in skipped[0].title


@pytest.mark.parametrize(("fmt", "kind"), CASES, ids=[f"{f}-{k}" for f, k in CASES])
def test_trace_of_only_impossible_events_is_refused(tmp_path, fmt, kind):
    bad, reason = _bad_row(fmt, kind)
    path = _write(tmp_path, fmt, [bad] * 3)
    with pytest.raises(TraceFormatError, match="no GPU activity left") as err:
        read_trace(path)
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_all_negative_durations_exit_1_with_one_line_and_no_output(tmp_path, capsys):
    """Issue #14: this used to exit 0 with a critical "GPU idle 100%" finding."""
    path = tracefiles.kineto(tmp_path, [(10.0 * i, -5.0) for i in range(5)])
    out = tmp_path / "out.json"
    assert main(["trace", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "5 negative duration" in err[0]
    assert not (out / "trace.json").exists()  # nothing analysed: no results file


@pytest.mark.parametrize("bad", [(1e17, 5.0), (10.0, 1e308), (10.0, "abc"), ({}, 5.0), "hello"],
                         ids=["ts_1e17", "dur_1e308", "dur_abc", "ts_object", "bare_string"])
def test_issue_cases_give_sane_shares_through_the_cli(tmp_path, capsys, bad):
    """Issue #14: compute -99.9 % / idle 199.9 %, OverflowError, ValueError, TypeError and
    AttributeError tracebacks before."""
    path = tracefiles.kineto(tmp_path, [*tracefiles.good_rows(True), bad])
    out = tmp_path / "out.json"
    assert main(["trace", str(path), "-o", str(out)]) == 0
    data = json.loads((out / "trace.json").read_text())
    trace = data["traces"][0]
    assert sum(trace["source"]["skipped"].values()) == 1
    b = trace["devices"][0]["breakdown"]
    shares = [b[k] for k in ("compute_share", "exposed_comm_share", "exposed_copy_share",
                             "idle_share")]
    assert all(0 <= s <= 1 for s in shares) and sum(shares) == pytest.approx(1)
    assert b["compute_share"] == pytest.approx(0.6)  # 3 x 5 us busy in a 25 us window
    assert "trace.skipped_events" in {f["id"] for f in trace["findings"]}
    assert "skipped 1 event" in capsys.readouterr().out


def _kernel(ts, dur, stream, corr=-1):
    return {"ph": "X", "cat": "kernel", "name": tracefiles.NAME, "pid": 0, "tid": stream,
            "ts": ts, "dur": dur, "args": {"device": 0, "stream": stream, "correlation": corr}}


def _write_events(tmp_path, events):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_same_kernel_on_concurrent_streams_has_share_of_busy_at_most_one(tmp_path):
    """Summed time of one kernel running on two streams at once is twice the busy time; its
    share of busy is its union, so 100 %, never 200 %."""
    events = [_kernel(0.0, 10.0, 7), _kernel(0.0, 10.0, 8)]
    result = analyze_trace(read_trace(_write_events(tmp_path, events)))
    top = result.devices[0].kernels.top[0]
    assert top.total_ns == 20_000 and top.union_ns == 10_000
    assert top.share_of_busy == 1.0


def test_cpu_self_time_during_idle_stays_within_idle(tmp_path):
    """Two launching threads, each with a CPU event that outlasts its parent, over a 100 us idle
    gap: before, the parent's self time went negative (-85 us) and the shares of idle of the two
    threads added up to 200 %."""
    events = [_kernel(0.0, 0.5, 7, corr=1), _kernel(0.5, 0.5, 7, corr=2),
              _kernel(101.0, 0.5, 7), _kernel(101.5, 0.5, 7)]
    for tid in (1, 2):
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
             "ts": 0.0, "dur": 0.2, "args": {"correlation": tid}},
            {"ph": "X", "cat": "python_function", "name": "outer", "pid": 1, "tid": tid,
             "ts": 1.0, "dur": 10.0},
            {"ph": "X", "cat": "cpu_op", "name": "outlasts_outer", "pid": 1, "tid": tid,
             "ts": 6.0, "dur": 95.0},
        ]
    result = analyze_trace(read_trace(_write_events(tmp_path, events)))
    cpu = result.devices[0].gaps.cpu_during_idle
    assert cpu.idle_ns == 100_000 and cpu.launching_threads == 2
    kinds = {k.kind: k for k in cpu.self_time_by_kind}
    assert kinds["python"].self_ns == 2 * 5_000  # outer minus the part of its child inside it
    assert kinds["cpu_op"].self_ns == 2 * 5_000  # the child, clipped to its parent
    assert all(0 <= k.share_of_idle <= 1 for k in kinds.values())
    assert sum(k.share_of_idle for k in kinds.values()) <= 1 + 1e-9


def test_zero_length_window_is_refused_not_divided_by_zero(tmp_path):
    path = tracefiles.kineto(tmp_path, [(10.0, 0.0), (10.0, 0.0)])
    with pytest.raises(TraceFormatError, match="0 ns"):
        analyze_trace(read_trace(path))


def test_zero_length_device_is_left_out_of_a_multi_device_trace(tmp_path):
    events = [_kernel(0.0, 5.0, 7), _kernel(10.0, 5.0, 7),
              {**_kernel(3.0, 0.0, 9), "args": {"device": 1, "stream": 9}}]
    result = analyze_trace(read_trace(_write_events(tmp_path, events)))
    assert [d.device for d in result.devices] == [0]
    assert any("device 1" in n and "0 ns" in n for n in result.source.notes)


@pytest.mark.parametrize("result", [
    {"devices": [{"share_of_busy": 1.5}]},
    {"x": {"idle_share": -0.2}},
    {"compute_share": 0.5, "exposed_comm_share": 0.0, "exposed_copy_share": 0.0,
     "idle_share": 0.2},
    {"share_of_idle": "nan"},
])
def test_check_shares_refuses_impossible_numbers(result):
    with pytest.raises(TraceFormatError, match="impossible"):
        check_shares(result, "t.json")


def test_explicit_window_beyond_int64_is_a_config_error(tmp_path, capsys):
    path = tracefiles.kineto(tmp_path, tracefiles.good_rows(True))
    assert main(["trace", str(path), "--window", "0:1e300", "-o", str(tmp_path / "o.json")]) == 1
    assert capsys.readouterr().err.startswith("error: --window")


def test_damaged_values_in_other_fields_become_unknown_not_tracebacks(tmp_path):
    """Ids, names and args of any JSON type (dict path of the Kineto reader)."""
    events = [_kernel(0.0, 5.0, 7),
              {"ph": "X", "cat": "kernel", "name": ["not", "text"], "pid": {}, "tid": 10**30,
               "ts": 10.0, "dur": 5.0, "args": ["no", "dict"]},
              {"ph": "X", "cat": ["x"], "name": 5, "ts": 12.0, "dur": 1.0},
              {"ph": "X", "cat": "kernel", "name": "big ids", "ts": 20.0, "dur": 1.0,
               "args": {"device": 0, "stream": "99999999999999999999999", "correlation": 2**70}}]
    trace = read_trace(_write_events(tmp_path, events))
    assert len(trace.gpu) == 3 and trace.meta.skipped == {}
    assert "['not', 'text']" in trace.names
    assert set(trace.gpu.stream.tolist()) >= {-1, 7}
    analyze_trace(trace)
