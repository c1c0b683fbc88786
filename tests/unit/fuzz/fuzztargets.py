"""Fuzz targets, one per reader: a hypothesis strategy for inputs that mix the real format's shape
with damaged and impossible values, and a check that runs the reader (and what consumes its
output) and asserts the invariants. The property is always the same: either a result that
satisfies the invariants, or a ``LatscopeError`` (one line for the user); any other exception is
a bug. ``test_fuzz.py`` runs each target briefly in CI; ``benchmarks/fuzz.py`` runs them longer.
"""

from __future__ import annotations

import gzip
import json
import math
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import orjson
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the shared file writers
import tracefiles  # noqa: E402

from latscope.errors import LatscopeError  # noqa: E402
from latscope.model import RequestRecord  # noqa: E402
from latscope.trace.analyze import analyze_trace, check_shares  # noqa: E402
from latscope.trace.files import as_json  # noqa: E402
from latscope.findings.trace import trace_findings  # noqa: E402
from latscope.trace.readers import read_trace  # noqa: E402

# --------------------------------------------------------------------------------------------
# Values a damaged file can hold where a number belongs.

_EDGE_NUMBERS = st.sampled_from([0, -1, 1, 2**31, 2**62, 2**62 + 1, 2**63 - 1, -(2**63), 1e17,
                                 1e308, -1e308, 5e-324, 0.5, -0.0])
NUMBER = st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False,
                                                             allow_infinity=False),
                   _EDGE_NUMBERS, st.integers(0, 10**6))
JSON_SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, st.text(max_size=8),
                        st.integers(2**64, 2**80), st.sampled_from(["abc", "nan", "1e400", "0x10",
                                                                    "12", ""]))
JSON_VALUE = st.recursive(JSON_SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)


def _maybe(value_strategy, good):
    """Mostly a plausible value (so the analyses run), sometimes anything."""
    return st.one_of(good, good, good, value_strategy)


# --------------------------------------------------------------------------------------------
# Trace readers: the invariants of a result.


def check_trace_result(path: Path) -> None:
    try:
        trace = read_trace(path)
        result = analyze_trace(trace)
        findings = trace_findings(result)
    except LatscopeError as exc:
        assert "\n" not in str(exc), "error messages are one line"
        return
    for table in (trace.gpu, trace.api, trace.ranges):
        if len(table):
            assert (table.end >= table.start).all(), "an event ends before it starts"
            assert (abs(table.start) <= 2**62).all()
    assert all(count > 0 for count in trace.meta.skipped.values())
    assert all(isinstance(n, str) for n in trace.names)
    # every share in 0..1, breakdown shares add up to 1
    check_shares(msgspec.to_builtins(result), str(path))
    for dev in result.devices:
        b = dev.breakdown
        assert b.window_ns > 0
        parts = (b.compute_ns, b.exposed_comm_ns, b.exposed_copy_ns, b.idle_ns)
        assert all(p >= 0 for p in parts) and sum(parts) == b.window_ns
        assert b.busy_ns <= b.window_ns
        k = dev.kernels
        assert k.kernel_count >= 0 and k.kernel_time_sum_ns >= 0
        assert dev.gaps.count >= 0 and dev.gaps.idle_ns == b.idle_ns
    orjson.dumps(as_json(result))  # the CLI writes it as JSON
    assert all(f.id.startswith("trace.") for f in findings)


def _in_tmp(write: Callable[[Path], Path]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_trace_result(write(Path(tmp)))


# Kineto: events of every category with plausible or damaged fields, plus non-object entries.
_CATS = st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver",
                         "cpu_op", "user_annotation", "python_function", "gpu_user_annotation",
                         "cuda_sync", "ac2g", "Trace"])
_NAMES = st.sampled_from(["ampere_sgemm_128x64_nn", "ncclDevKernel_AllReduce_RING_LL",
                          "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)",
                          "cudaLaunchKernel", "cudaGraphLaunch", "hipMemcpyWithStream",
                          "ProfilerStep#1", "execute_model", "Cijk_Alik_Bljk_SB_MT64x64x8_SN",
                          "void at::native::elementwise_kernel<128, 4>(int, float)", "}, {", ""])
_SMALL_TIME = st.floats(0, 1000, allow_nan=False)
KINETO_EVENT = st.fixed_dictionaries(
    {"ph": _maybe(JSON_VALUE, st.just("X")), "cat": _maybe(JSON_VALUE, _CATS),
     "name": _maybe(JSON_VALUE, _NAMES), "ts": _maybe(JSON_VALUE, _SMALL_TIME),
     "dur": _maybe(JSON_VALUE, st.floats(0, 50, allow_nan=False)),
     "pid": _maybe(JSON_VALUE, st.integers(0, 3)), "tid": _maybe(JSON_VALUE, st.integers(0, 3)),
     "args": _maybe(JSON_VALUE, st.fixed_dictionaries(
         {}, optional={"device": _maybe(JSON_VALUE, st.integers(0, 2)),
                       "stream": _maybe(JSON_VALUE, st.integers(0, 3)),
                       "correlation": _maybe(JSON_VALUE, st.integers(0, 20)),
                       "bytes": _maybe(JSON_VALUE, st.integers(0, 1 << 24))}))})
KINETO_DOC = st.fixed_dictionaries(
    {"traceEvents": st.lists(st.one_of(KINETO_EVENT, KINETO_EVENT, KINETO_EVENT, JSON_VALUE),
                             max_size=12)},
    optional={"deviceProperties": JSON_VALUE, "distributedInfo": JSON_VALUE,
              "cuda_runtime_version": JSON_VALUE, "hip_runtime_version": JSON_VALUE})


def kineto_json(doc: dict[str, Any], compress: bool) -> None:
    def write(tmp: Path) -> Path:
        data = json.dumps(doc).encode()
        path = tmp / "t.json"
        path.write_bytes(gzip.compress(data) if compress else data)
        return path
    _in_tmp(write)


# Byte-level damage to a valid trace: truncation, flipped bytes, inserted bytes.
_DAMAGE = st.lists(st.tuples(st.sampled_from(["cut", "flip", "insert"]), st.integers(0, 10**6),
                             st.binary(min_size=1, max_size=4)), min_size=1, max_size=3)


def damaged_bytes(writer: str, rows: list, damage: list, compress: bool) -> None:
    def write(tmp: Path) -> Path:
        path = tracefiles.WRITERS[writer][0](tmp, rows)
        target = path if path.is_file() else next(path.glob("*.csv"))
        data = bytearray(target.read_bytes())
        for op, at, blob in damage:
            at = at % (len(data) + 1)
            if op == "cut":
                del data[at:]
            elif op == "flip" and at < len(data):
                data[at] ^= blob[0] or 0xFF
            else:
                data[at:at] = blob
        target.write_bytes(gzip.compress(bytes(data)) if compress and path.is_file()
                           else bytes(data))
        return path
    _in_tmp(write)


# rocprofv3 JSON: buffer records with plausible or damaged fields.
_RECORD = st.fixed_dictionaries(
    {"start_timestamp": _maybe(JSON_VALUE, st.integers(0, 10**6)),
     "end_timestamp": _maybe(JSON_VALUE, st.integers(0, 10**6)),
     "correlation_id": _maybe(JSON_VALUE, st.fixed_dictionaries({"internal": st.integers(0, 9)})),
     "dispatch_info": _maybe(JSON_VALUE, st.fixed_dictionaries(
         {"agent_id": _maybe(JSON_VALUE, st.fixed_dictionaries({"handle": st.integers(0, 3)})),
          "queue_id": _maybe(JSON_VALUE, st.fixed_dictionaries({"handle": st.integers(0, 3)})),
          "kernel_id": _maybe(JSON_VALUE, st.integers(0, 3))})),
     "operation": _maybe(JSON_VALUE, st.integers(0, 5)), "bytes": _maybe(JSON_VALUE, NUMBER),
     "kind": _maybe(JSON_VALUE, st.integers(0, 3)),
     "thread_id": _maybe(JSON_VALUE, st.integers(0, 3))})
ROCPROFV3_DOC = st.fixed_dictionaries({
    "agents": _maybe(JSON_VALUE, st.lists(st.fixed_dictionaries(
        {"id": st.fixed_dictionaries({"handle": st.integers(0, 3)}), "type": st.integers(1, 2),
         "name": _maybe(JSON_VALUE, st.just("gfx942"))}), max_size=3)),
    "kernel_symbols": _maybe(JSON_VALUE, st.lists(st.fixed_dictionaries(
        {"kernel_id": _maybe(JSON_VALUE, st.integers(0, 3)),
         "kernel_name": _maybe(JSON_VALUE, _NAMES)}), max_size=4)),
    "strings": _maybe(JSON_VALUE, st.just({"buffer_records": [
        {"kind": "HIP_RUNTIME_API", "operations": ["hipLaunchKernel", "hipMemcpy"]}]})),
    "buffer_records": st.fixed_dictionaries({
        "kernel_dispatch": st.lists(st.one_of(_RECORD, _RECORD, JSON_VALUE), max_size=15),
        "memory_copy": st.lists(st.one_of(_RECORD, JSON_VALUE), max_size=5),
        "hip_api": st.lists(st.one_of(_RECORD, JSON_VALUE), max_size=5)})})


def rocprofv3_json(tool: dict[str, Any]) -> None:
    def write(tmp: Path) -> Path:
        path = tmp / "results.json"
        path.write_text(json.dumps({"rocprofiler-sdk-tool": [tool]}))
        return path
    _in_tmp(write)


# rocprofv3 CSV: a header with the needed columns (some maybe missing) and cells of any text.
_CSV_COLUMNS = ["Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Kernel_Name", "Correlation_Id",
                "Start_Timestamp", "End_Timestamp"]
_CELL = st.one_of(st.integers(-10, 10**6).map(str), st.text(max_size=6),
                  st.sampled_from(["Agent 1", "1", "abc", "nan", "1e308", "99999999999999999999",
                                   '"', ",", "\n", ""]))
ROCPROFV3_CSV = st.tuples(
    st.lists(st.sampled_from(_CSV_COLUMNS), min_size=1, max_size=10, unique=True)
    .map(lambda cols: cols if len(cols) > 3 else _CSV_COLUMNS),
    st.lists(st.lists(_CELL, min_size=0, max_size=10), max_size=12))


def rocprofv3_csv(table: tuple[list[str], list[list[str]]]) -> None:
    header, rows = table

    def write(tmp: Path) -> Path:
        folder = tmp / "csv"
        folder.mkdir()
        lines = [",".join(f'"{h}"' for h in header)]
        lines += [",".join(f'"{c}"' if c.isdigit() else c for c in row) for row in rows]
        (folder / "1_kernel_trace.csv").write_text("\n".join(lines) + "\n")
        return folder
    _in_tmp(write)


# SQLite readers: columns of any SQLite type (SQLite is dynamically typed).
SQL_VALUE = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**6),
                      st.integers(0, 10**6), st.floats(allow_nan=False), st.text(max_size=6),
                      st.binary(max_size=4))
_SQL_ROW = st.tuples(*[_maybe(SQL_VALUE, st.integers(0, 10**6))] * 2,
                     *[_maybe(SQL_VALUE, st.integers(0, 3))] * 4)
SQL_ROWS = st.lists(_SQL_ROW, max_size=20)


def rocpd_sqlite(rows: list[tuple]) -> None:
    def write(tmp: Path) -> Path:
        path = tmp / "1_results.db"
        conn = sqlite3.connect(path)
        conn.execute('CREATE TABLE rocpd_kernel_dispatch (start, "end", agent_id, queue_id, '
                     "kernel_id, event_id)")
        conn.execute("CREATE TABLE rocpd_info_kernel_symbol (id, display_name, kernel_name)")
        conn.execute("CREATE TABLE rocpd_event (id, category_id, stack_id)")
        conn.execute("CREATE TABLE rocpd_string (id, string)")
        conn.execute('CREATE TABLE rocpd_region (start, "end", name_id, pid, tid, event_id)')
        conn.execute("INSERT INTO rocpd_info_kernel_symbol VALUES (1, ?, NULL)", (tracefiles.NAME,))
        conn.execute("INSERT INTO rocpd_string VALUES (1, 'MARKER_CORE_API'), (2, 3)")
        conn.executemany("INSERT INTO rocpd_kernel_dispatch VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO rocpd_event VALUES (?, ?, ?)", [r[2:5] for r in rows])
        conn.executemany("INSERT INTO rocpd_region VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.commit()
        conn.close()
        return path
    _in_tmp(write)


def nsys_sqlite(rows: list[tuple]) -> None:
    def write(tmp: Path) -> Path:
        path = tmp / "report.sqlite"
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE StringIds (id, value)")
        conn.execute("INSERT INTO StringIds VALUES (1, ?), (2, 'cudaLaunchKernel_v7000'), (3, 4)",
                     (tracefiles.NAME,))
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, "
                     "correlationId, demangledName)")
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, "
                     "correlationId, nameId)")
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, "
                     "correlationId, bytes, copyKind, srcKind, dstKind)")
        conn.execute("CREATE TABLE NVTX_EVENTS (start, end, globalTid, text, textId, eventType)")
        conn.execute("CREATE TABLE TARGET_INFO_GPU (id, name)")
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)",
                         [r[:5] for r in rows])
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?)",
                         [r + r[:3] for r in rows[:5]])
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, 59)",
                         [r[:5] for r in rows])
        conn.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?, ?)", [r[2:4] for r in rows[:3]])
        conn.commit()
        conn.close()
        return path
    _in_tmp(write)


# --------------------------------------------------------------------------------------------
# vLLM server logs: real line shapes with their values replaced by anything.

_LOG_TEMPLATES = [
    "INFO {d} {t} [loggers.py:123] Engine {n}: Avg prompt throughput: {f} tokens/s, Avg "
    "generation throughput: {f} tokens/s, Running: {n} reqs, Waiting: {n} reqs, GPU KV cache "
    "usage: {f}%, Prefix cache hit rate: {f}%",
    "(APIServer pid={n}) INFO {d} {t} [api_server.py:1] vLLM API server version {x}",
    "INFO {d} {t} [core.py:1] Initializing a V1 LLM engine (v{x}) with config: "
    "enforce_eager={b}, enable_chunked_prefill={b}, max_seq_len={n}, tensor_parallel_size={n}",
    "INFO {d} {t} [utils.py:1] non-default args: {lit}",
    "INFO {d} {t} [kv_cache_utils.py:1] GPU KV cache size: {n} tokens",
    "INFO {d} {t} [kv_cache_utils.py:1] Maximum concurrency for {n} tokens per request: {f}x",
    "INFO {d} {t} [scheduler.py:1] Chunked prefill is enabled with max_num_batched_tokens={n}.",
    "INFO {d} {t} [arg_utils.py:1] Defaulting max_num_seqs to {n}",
    "WARNING {d} {t} [envs.py:1] Unknown vLLM environment variable detected: {x}",
    "DEBUG {d} {t} [core.py:1] Running batch with {n} requests",
    "INFO {d} {t} [logger.py:1] Received request {x}: prompt: 'hi'",
    "INFO:     127.0.0.1:5555 - \"POST /v1/completions HTTP/1.1\" 200 OK",
    "INFO {d} {t} [gpu_model_runner.py:1] Graph capturing finished in {n} secs, took {f} GiB",
    "INFO {d} {t} [backends.py:1] Using {x} backend out of potential backends",
    "{x}",
]
_LOG_VALUE = st.one_of(st.integers(-5, 10**6).map(str), st.floats(allow_nan=True).map(str),
                       st.text(max_size=8), st.sampled_from(["1,2,,3", ",", "1.2.3", "-", "\x00",
                                                             "1e400", "\x1b[1;32m", "\r"]))
_LITERAL = st.one_of(JSON_VALUE.map(repr), st.text(max_size=30),
                     st.sampled_from(["{'model': 'x', 'api_key': 'sk-secret'}", "{[1]: 2}",
                                      "{" * 200, "{'a': -'b'}", "ProfilerConfig(x=1)",
                                      "{'a': b'\\x00', 'c': 1j}", "\x00"]))


@st.composite
def log_lines(draw) -> list[str]:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        template = draw(st.sampled_from(_LOG_TEMPLATES))
        fill = {"d": draw(st.one_of(st.just("01-02"), st.text("0123456789-", min_size=5,
                                                                 max_size=5))),
                "t": draw(st.one_of(st.just("10:11:12"), st.text("0123456789:", min_size=8,
                                                                    max_size=8))),
                "n": draw(_LOG_VALUE), "f": draw(_LOG_VALUE), "x": draw(_LOG_VALUE),
                "b": draw(st.sampled_from(["True", "False", "maybe"])), "lit": draw(_LITERAL)}
        lines.append(template.format(**fill) + "\n")
    return lines


def vllm_log(lines: list[str]) -> None:
    from latscope.server.logs import parse_log

    try:
        log = parse_log(lines, name="fuzz.log")
    except LatscopeError as exc:
        assert "\n" not in str(exc)
        return
    rate = log.line_rate
    assert rate.total_lines == len(lines)
    assert 0 <= rate.timestamped_lines <= rate.total_lines and rate.span_s >= 0
    assert len(log.stats) <= rate.timestamped_lines
    assert all(v >= 0 for v in rate.by_level.values())
    assert "sk-secret" not in repr(log.to_dict())  # secrets never kept
    orjson.dumps(log.to_dict(), default=str)  # `latscope logs --json` writes it


# --------------------------------------------------------------------------------------------
# Prometheus text: real vLLM line shapes, damaged.

_PROM_LINES = [
    "# HELP vllm:{m} {x}", "# TYPE vllm:{m} {typ}", "vllm:{m}{{model_name=\"{x}\"}} {v}",
    "vllm:{m}_bucket{{le=\"{le}\",model_name=\"m\"}} {v}", "vllm:{m}_sum{{model_name=\"m\"}} {v}",
    "vllm:{m}_count{{model_name=\"m\"}} {v}", "vllm:{m}_total {v}", "vllm:{m}_created {v}",
    "{x}", "vllm:{m}{{{x}}} {v}", "vllm:{m} {v} {v}",
]
_METRIC = st.sampled_from(["request_queue_time_seconds", "time_to_first_token_seconds",
                           "num_requests_running", "gpu_cache_usage_perc", "prompt_tokens",
                           "time_per_output_token_seconds", "x"])
_PROM_VALUE = st.one_of(st.floats().map(repr), st.integers(-5, 10**9).map(str),
                        st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "abc", "", "0x1", "1_0"]))


@st.composite
def prometheus_text(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 15))):
        template = draw(st.sampled_from(_PROM_LINES))
        lines.append(template.format(m=draw(_METRIC), x=draw(st.text(max_size=8)),
                                     typ=draw(st.sampled_from(["histogram", "counter", "gauge",
                                                               "summary", "bogus"])),
                                     v=draw(_PROM_VALUE),
                                     le=draw(st.one_of(_PROM_VALUE, st.just("+Inf")))))
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n# EOF\n"]))


def prometheus(texts: tuple[str, str]) -> None:
    from latscope.model import MetricSnapshot
    from latscope.server.metrics import histogram_delta, parse_metrics_text

    pages = []
    for text in texts:
        try:
            pages.append(parse_metrics_text(text))
        except LatscopeError as exc:
            assert "\n" not in str(exc)
            return
    for page in pages:
        assert all(isinstance(s.value, float) for s in page.samples)
    first, last = (MetricSnapshot(t_ns=i * 10**9, wall_time=0.0, samples=p.samples)
                   for i, p in enumerate(pages))
    for family in ("vllm:request_queue_time_seconds", "vllm:time_to_first_token_seconds",
                   "vllm:inter_token_latency_seconds"):
        delta = histogram_delta(first, last, family)
        if delta is None:
            continue
        for q in (0.5, 0.9, 0.99):
            est = delta.quantile(q)
            if est is not None and not any(math.isnan(x) for x in (est.lower, est.upper)):
                assert est.lower <= est.upper
        orjson.dumps(delta.to_dict(), option=orjson.OPT_NON_STR_KEYS)


# --------------------------------------------------------------------------------------------
# SSE framing: streamed bodies, split into reads at arbitrary points.

_SSE_EVENTS = [b'data: {"choices":[{"text":"a"}]}', b'data: {"choices":[{"delta":{"content":""}}]}',
               b'data: {"choices":[{"delta":{"role":"assistant"}}]}', b"data: [DONE]",
               b": keep-alive", b"event: x\ndata: {\"text\": \"b\"}", b'data: {"error":"boom"}',
               b'data: {"usage":{"completion_tokens":3,"prompt_tokens":2}}', b"data: not json",
               b'data: {"metrics":{"ttft":1}, "usage":{"completion_tokens":1}}', b"retry: 5"]


@st.composite
def sse_reads(draw) -> list[tuple[int, bytes]]:
    events = draw(st.lists(st.one_of(st.sampled_from(_SSE_EVENTS), st.binary(max_size=12)),
                           max_size=10))
    sep = draw(st.sampled_from([b"\n\n", b"\r\n\r\n"]))
    body = sep.join(events) + draw(st.sampled_from([sep, b"", b"\n"]))
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=6)))
    pieces, last = [], 0
    for cut in [*cuts, len(body)]:
        if cut > last:
            pieces.append(body[last:cut])
            last = cut
    return [(1000 * (i + 1), p) for i, p in enumerate(pieces)]


def sse(reads: list[tuple[int, bytes]]) -> None:
    from latscope.load.response import _read_stream

    record = RequestRecord(index=0, request_id="r", scheduled_ns=0)
    problem = _read_stream(record, reads)
    assert problem is None or isinstance(problem, str)
    times = [ns for ns, _ in reads]
    assert all(ns in times for ns in record.chunk_ns)
    assert record.chunk_ns == sorted(record.chunk_ns), "token times go backwards"
    if record.output_tokens is not None:
        assert record.output_tokens >= 0


# Keys near the ones the readers look for, with every whitespace the exact reader's \s allows,
# placed at any offset (the C pass tests 16 bytes at once: a key may straddle two blocks)
_KEYS = [b"text", b"content", b"reasoning", b"reasoning_content", b"role", b"error",
         b"completion_tokens", b"texts", b"conten", b"reason", b"rol", b"usage"]
_SPACES = [b"", b" ", b"\t", b"\f", b"\v", b"  "]


@st.composite
def keyed_event(draw) -> bytes:
    """One ``data: {...}`` event with one or two keys of ``_KEYS``, spaced and padded."""
    fields = []
    for _ in range(draw(st.integers(1, 2))):
        pad = b"x" * draw(st.integers(0, 40))
        key, before, after = (draw(st.sampled_from(_KEYS)), draw(st.sampled_from(_SPACES)),
                              draw(st.sampled_from(_SPACES)))
        value = draw(st.sampled_from([b'"v"', b'""', b"1", b'"\\"text\\":\\"x"']))
        fields.append(b'"%s":0,"%s"%s:%s%s' % (pad, key, before, after, value))
    return b"data: {" + b",".join(fields) + b"}"


@st.composite
def chunked_reads(draw) -> list[tuple[int, bytes]]:
    """An HTTP/1.1 chunked body (sometimes damaged) of an SSE stream, split into reads."""
    events = draw(st.lists(st.one_of(st.sampled_from(_SSE_EVENTS), keyed_event()), max_size=6))
    if draw(st.booleans()):
        events.append(b"data: [DONE]")  # the usual end, which the fast path needs
    chunks = [e + b"\n\n" for e in events]
    if chunks and draw(st.booleans()):  # several events in one chunk (a proxy's coalescing)
        sizes = draw(st.lists(st.integers(1, 3), min_size=len(chunks), max_size=len(chunks)))
        grouped, at = [], 0
        for size in sizes:
            if at < len(chunks):
                grouped.append(b"".join(chunks[at:at + size]))
                at += size
        chunks = grouped
    if chunks and draw(st.booleans()):  # chunks that end inside events (a proxy's re-chunking)
        data = b"".join(chunks)
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=5))))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)]) if b > a]
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    if draw(st.booleans()):
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.binary(max_size=3)) + body[at + draw(st.integers(0, 3)):]
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(body) - 1)), max_size=4))))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)]) if b > a]
    return [(1000 * (i + 1), p) for i, p in enumerate(pieces)]


def sse_chunked(reads: list[tuple[int, bytes]]) -> None:
    """Each quick pass (the C one where built, its pure-Python twin) must agree with the exact
    per-event reader whenever it answers, and take nothing that is not valid chunked framing."""
    from latscope import native
    from latscope.load.response import FramingError, _read_stream, dechunk, read_stream_quick

    took = {}
    for name, backend in native.BACKENDS.items():
        record = RequestRecord(index=0, request_id="r", scheduled_ns=0)
        if read_stream_quick(record, reads, scan=backend.scan_stream):
            took[name] = record
    try:
        pieces = dechunk(reads)
    except FramingError:
        assert not took, f"{sorted(took)} accepted a body that is not valid chunked framing"
        return
    exact = RequestRecord(index=0, request_id="r", scheduled_ns=0)
    problem = _read_stream(exact, pieces)
    for name, record in took.items():
        assert problem is None, name
        assert (record.chunk_ns, record.chunk_tokens, record.output_tokens,
                record.first_token_ns, record.prompt_tokens, record.output_tokens_source,
                record.server) == \
            (exact.chunk_ns, exact.chunk_tokens, exact.output_tokens, exact.first_token_ns,
             exact.prompt_tokens, exact.output_tokens_source, exact.server), name


@dataclass
class Target:
    name: str
    strategy: Any
    check: Callable[..., None]


TARGETS = [
    Target("kineto_json", st.tuples(KINETO_DOC, st.booleans()), lambda a: kineto_json(*a)),
    Target("trace_bytes", st.tuples(st.sampled_from(sorted(tracefiles.WRITERS)),
                                    st.lists(st.tuples(_SMALL_TIME, st.floats(0, 50)),
                                             min_size=1, max_size=6),
                                    _DAMAGE, st.booleans()),
           lambda a: damaged_bytes(a[0], _rows_for(a[0], a[1]), a[2], a[3])),
    Target("rocprofv3_json", ROCPROFV3_DOC, rocprofv3_json),
    Target("rocprofv3_csv", ROCPROFV3_CSV, rocprofv3_csv),
    Target("rocpd_sqlite", SQL_ROWS, rocpd_sqlite),
    Target("nsys_sqlite", SQL_ROWS, nsys_sqlite),
    Target("vllm_log", log_lines(), vllm_log),
    Target("prometheus", st.tuples(prometheus_text(), prometheus_text()), prometheus),
    Target("sse", sse_reads(), sse),
    Target("sse_chunked", chunked_reads(), sse_chunked),
]


def _rows_for(writer: str, pairs: list[tuple[float, float]]) -> list[tuple]:
    if tracefiles.WRITERS[writer][1]:
        return pairs
    return [(int(ts * 1000), int(ts * 1000 + dur * 1000)) for ts, dur in pairs]
