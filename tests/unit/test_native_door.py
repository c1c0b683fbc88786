"""The C part behind one door (``latscope.native``): every function answers alike from either back
end, the C one and its pure-Python twins, and nothing else imports ``_native``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

import fakeserver
from latscope import native
from latscope.load.response import _read_stream, dechunk
from latscope.model import RequestRecord, gaps_of_times
from latscope.rundir import _GAPS_AT, _LINE_KEYS, _record_values

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(params=["c", "python"])
def backend(request) -> native.Backend:
    if request.param not in native.BACKENDS:
        pytest.skip("the C part is not built (tests/unit/test_native.py says why)")
    return native.BACKENDS[request.param]


def _body(chat: bool, tokens: int) -> bytes:
    events = list(fakeserver._events(chat, tokens, 11, True, False))
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def test_the_stream_pass_reads_what_the_exact_reader_reads(backend):
    for chat in (False, True):
        body = _body(chat, 40)
        for step in (len(body), 61):
            reads = [(1000 + i, body[i:i + step]) for i in range(0, len(body), step)]
            exact = RequestRecord(index=0, request_id="r", scheduled_ns=0)
            assert _read_stream(exact, dechunk(reads)) is None
            scanned = backend.scan_stream(reads, 0)
            if scanned is None:  # (the twin declines marks split across reads)
                assert backend.name == "python" and step != len(body)
                continue
            times, tail = scanned
            assert times == exact.chunk_ns and b'"completion_tokens":40' in tail
    assert backend.scan_stream([(1, b"HTTP/1.1 200 OK\r\n\r\n")], 0) is None  # not a body


def test_the_gap_store_keeps_numpys_gaps(backend):
    times = [10**15, 10**15, 10**15 + 7_000_001, 10**15 + 9_000_000]
    store = backend.GapStore(8)
    assert store.add_times(times) and store.count == 3 and store.kept == 3
    gaps = np.diff(np.asarray(times, dtype=np.int64)) / 1e6
    assert store.values() == gaps.astype(np.float32).tobytes()
    assert (store.lo, store.hi) == (gaps.min(), gaps.max())
    assert not store.add_times(list(range(0, 7 * 10**6, 10**6)))  # 6 more: past the cap of 8
    assert store.count == 3


def test_a_record_line_and_its_gaps_read_back(backend):
    t = 10**13
    record = RequestRecord(index=4, request_id="latscope-1-4", scheduled_ns=t, sent_ns=t + 1,
                           first_token_ns=t + 9, end_ns=t + 40, status=200, output_tokens=4,
                           output_tokens_source="usage", chunk_ns=[t + 9, t + 9, t + 20, t + 40])
    line = backend.record_line(_LINE_KEYS, _record_values(record), _GAPS_AT)
    fields = {("chunk_gaps_ns" if k == "chunk_ns" else k): v for k, v in record.to_dict().items()}
    fields["chunk_gaps_ns"] = gaps_of_times(record.chunk_ns)
    assert line == orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE)  # orjson's own line
    assert RequestRecord.from_dict(orjson.loads(line)) == record
    found = backend.json_gaps(line)
    assert found is not None
    start, end, gaps = found
    assert orjson.loads(line[start - 1:end + 1]) == gaps_of_times(record.chunk_ns)
    store = backend.GapStore(8)
    store.add_times(record.chunk_ns)
    assert gaps is not None and gaps[0] == store.values()
    assert backend.json_gaps(b'{"chunk_ns":[1,2]}') is None  # schema 1's times: decoded whole


def test_the_door_is_the_only_way_in():
    # _native is imported in one place; every other module takes its functions from
    # latscope.native (six modules imported it with their own try/except before)
    importers = []
    for path in (SRC / "latscope").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) and node.module else [])
            if any(n.startswith("latscope._native") for n in names):
                importers.append(path.name)
    assert importers == ["native.py"]


def test_the_twins_can_be_asked_for_where_the_c_part_is_built():
    # LATSCOPE_NATIVE=python takes the twins everywhere (a suspected C bug, or a measurement
    # of what the C buys), and the run says so
    code = ("from latscope import native; from latscope.load import response; "
            "print(native.BACKEND, response.STREAM_PARSER, "
            "response.scan_stream is native.PYTHON.scan_stream)")
    env = {**os.environ, "LATSCOPE_NATIVE": "python"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["python", "python", "True"]
