"""Bugs the fuzz targets found, each kept as the (shrunk) input that showed it, plus a direct
check of the behaviour that was wrong."""

from __future__ import annotations

import json
import sqlite3

import fuzztargets as fz
import numpy as np
import pytest
import tracefiles

from latscope.errors import TraceFormatError
from latscope import native
from latscope.load.response import _read_stream, dechunk, read_stream_quick
from latscope.model import RequestRecord
from latscope.server.logs import parse_log
from latscope.trace.analysis import intervals as iv
from latscope.trace.readers import read_trace


def _read_stream_fast(record, reads):
    """The pure-Python quick pass (``latscope.fastread``), where a response is read."""
    return read_stream_quick(record, reads, scan=native.PYTHON.scan_stream)


def test_rocprof_v1_json_with_an_integer_wider_than_64_bits(tmp_path):
    """IntegerOverflow (latscope's internal retry signal) escaped from the rocprof v1 reader."""
    path = tmp_path / "results.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "k", "pid": 6, "ts": "1", "dur": "2", '
                    '"args": {"queue-id": 18446744073709551616}}, '
                    '{"ph": "M", "name": "process_name", "pid": 6, "args": {"name": "GPU0"}}]}')
    trace = read_trace(path)
    assert len(trace.gpu) == 1 and trace.gpu.stream[0] == -1  # the wide id is unknown
    bare = tmp_path / "bare.json"  # an array element cannot be quoted: a one-line refusal
    bare.write_text('{"traceEvents": [{"ph": "X", "ts": "1"}, 18446744073709551616]}')
    with pytest.raises(TraceFormatError, match="wider than 64 bits"):
        read_trace(bare)


def test_union_of_intervals_before_time_zero():
    """A union's segment ending before 0 got end 0 (np.maximum.at into zeros): breakdown parts
    of 2 ns in a 1 ns window on an nsys/rocpd trace with negative timestamps."""
    starts, ends = iv.union(np.array([-5, -2, 0]), np.array([-3, -1, 0]))
    assert starts.tolist() == [-5, -2, 0] and ends.tolist() == [-3, -1, 0]
    fz.nsys_sqlite([(0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, None), (0, 0, None, None, None, None),
                    (-2, -1, 1, 0, 0, 0)])
    fz.rocpd_sqlite([(0, 0, 0, 0, 0, 0), (-2, -1, None, 0, 0, 0)])


def test_list_valued_time_in_rocprofv3_json(tmp_path):
    """A list where a timestamp belongs made a 2-D column (IndexError in the analysis)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    trace = read_trace(tracefiles.rocprofv3_json(tmp_path / "a", [(1000, 2000), (3000, [])]))
    assert len(trace.gpu) == 1 and trace.meta.skipped == {"time is not a number": 1}
    with pytest.raises(TraceFormatError, match="no GPU activity left"):
        read_trace(tracefiles.rocprofv3_json(tmp_path / "b", [(1000, [])]))


def test_sqlite_text_that_is_not_utf8(tmp_path):
    """UnicodeDecodeError from sqlite3 on a damaged file (a byte flipped in sqlite_master)."""
    path = tmp_path / "report.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, "
                 "correlationId, demangledName)")
    conn.execute("CREATE TABLE StringIds (id, value)")
    conn.execute("INSERT INTO StringIds VALUES (1, CAST(X'ff6b65726e656c' AS TEXT))")
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, 10, 0, 7, 1, 1)")
    conn.commit()
    conn.close()
    trace = read_trace(path)
    assert trace.names == ["\ufffdkernel"]
    fz.damaged_bytes("rocpd-sqlite", [(0.0, 0.0)], [("flip", 4051, b"\x00")], False)


def test_log_config_value_that_is_no_number():
    """float('') on "Maximum concurrency ... request: ,x" raised ValueError from parse_log."""
    log = parse_log(["INFO 01-02 10:11:12 [kv_cache_utils.py:1] Maximum concurrency for 0 "
                     "tokens per request: ,x\n",
                     "INFO 01-02 10:11:13 [kv_cache_utils.py:1] Maximum concurrency for 2,048 "
                     "tokens per request: 12.5x\n"])
    assert log.config["max_concurrency"] == 12.5 and log.config_lines["max_concurrency"] == 2


def test_fast_stream_reader_refuses_damaged_chunk_framing():
    """The fast path counted tokens of a body whose chunk size line is not hex; the exact
    reader (and dechunk) call it malformed."""
    reads = [(1000, b"\x00e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")]
    record = RequestRecord(index=0, request_id="r", scheduled_ns=0)
    assert not _read_stream_fast(record, reads)
    good = b'data: {"text":"a"}\n\n'
    sizes_wrong = [(1000, b"%x\r\n%s\r\n" % (len(good) + 1, good) + b"e\r\ndata: [DONE]\n\n\r\n"
                    b"0\r\n\r\n")]
    assert not _read_stream_fast(RequestRecord(index=0, request_id="r", scheduled_ns=0),
                                 sizes_wrong)
    right = [(1000, b"%x\r\n%s\r\n" % (len(good), good) + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")]
    fast = RequestRecord(index=0, request_id="r", scheduled_ns=0)
    assert _read_stream_fast(fast, right)
    exact = RequestRecord(index=0, request_id="r", scheduled_ns=0)
    assert _read_stream(exact, dechunk(right)) is None
    assert fast.chunk_ns == exact.chunk_ns == [1000]
    fz.sse_chunked(reads)


def test_fast_and_exact_readers_agree_on_coalesced_chunks_and_an_early_usage_event():
    """Found once the fuzzer coalesced events into chunks and ended streams with [DONE]: the
    exact reader timed every event of a chunk by the chunk's end (the fast one by the read that
    completed it), and the fast reader took usage from the last 2 KB where the exact one reads
    the last 3 events."""
    coalesced = [(1000, b'44\r\ndata: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"'),
                 (2000, b'a"}]}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n')]
    text = b'data: {"choices":[{"text":"a"}]}\n\n'
    usage = b'data: {"metrics":{"ttft":1}, "usage":{"completion_tokens":1}}\n\n'
    early_usage = [(1000, b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in
                                   (text, usage, text, text, b"data: [DONE]\n\n")) + b"0\r\n\r\n")]
    for reads, times, tokens in ((coalesced, [1000, 2000], 2), (early_usage, [1000] * 3, 3)):
        fast = RequestRecord(index=0, request_id="r", scheduled_ns=0)
        assert _read_stream_fast(fast, reads)
        exact = RequestRecord(index=0, request_id="r", scheduled_ns=0)
        assert _read_stream(exact, dechunk(reads)) is None
        assert fast.chunk_ns == exact.chunk_ns == times
        assert fast.output_tokens == exact.output_tokens == tokens
        fz.sse_chunked(reads)


def test_kineto_document_found_by_the_fuzzer_once(tmp_path):
    """The first fuzz find (rocprof v1 detection through '"ts": ""' plus a wide integer)."""
    doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "", "dur": 0.0,
                            "pid": 0, "tid": 0, "args": {}}, 18_446_744_073_709_551_616]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError):
        read_trace(path)


def test_log_non_default_args_with_an_integer_wider_than_64_bits(tmp_path, capsys):
    """`latscope logs --json` failed with orjson's "Integer exceeds 64-bit range"."""
    from latscope.cli.main import main

    line = "INFO 01-02 10:11:12 [utils.py:1] non-default args: {'seed': 18446744073709551616}\n"
    fz.vllm_log([line])
    log = tmp_path / "server.log"
    log.write_text(line)
    assert main(["logs", str(log), "-o", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "log.json").read_text())["log"]["config"][
        "non_default_args"]["seed"] == "18446744073709551616"
