"""latscope's optional C part (src/latscope/_native.c) is built where the tests run, and its
three key searches (AVX2, SSE2, portable) answer alike."""

from __future__ import annotations

import importlib.util
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
import fuzztargets  # noqa: E402

import fakeserver  # noqa: E402


def test_the_c_part_is_built_and_chosen():
    # scripts/install.sh builds it (setup.py) where a compiler is found; without it the client
    # costs ~3.5x the CPU per streamed token and every test of the C paths skips: CI must not
    # pass on the fallback unnoticed
    from latscope import native
    from latscope.load import response

    assert native.C is not None, "_native.c is not built: bash scripts/install.sh"
    assert native.BACKEND == "c" and response.STREAM_PARSER == "c"
    assert response.scan_stream is native.C.scan_stream


def _variant_build(tmp_path: Path, flag: str):
    """_native.c built with ``flag``: -DLATSCOPE_NO_SIMD, the key search hosts without SSE2
    take; -DLATSCOPE_NO_AVX2, the one x86 hosts without AVX2 take; -DLATSCOPE_NO_AVX512, the
    one AVX2 hosts without AVX-512BW take."""
    from latscope import _native

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    source = Path(_native.__file__).with_name("_native.c")
    folder = tmp_path / flag.lower().lstrip("-")
    folder.mkdir()
    built = folder / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", flag,
                    "-I" + sysconfig.get_paths()["include"], str(source), "-o", str(built)],
                   check=True)
    spec = importlib.util.spec_from_file_location("latscope._native", built)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _searches(tmp_path: Path) -> list:
    """Every key search this host can run: the module's (AVX-512BW's where the CPU has it,
    else AVX2's, else SSE2's), AVX2's where the module took AVX-512BW's, SSE2's, the
    portable one (aarch64 hosts, Grace Hopper, build that one)."""
    from latscope import _native

    searches = [_native]
    if _native.KEY_SEARCH == "avx512bw":
        searches.append(_variant_build(tmp_path, "-DLATSCOPE_NO_AVX512"))
        assert searches[-1].KEY_SEARCH == "avx2"
    return searches + [_variant_build(tmp_path, "-DLATSCOPE_NO_AVX2"),
                       _variant_build(tmp_path, "-DLATSCOPE_NO_SIMD")]


def test_every_key_search_answers_alike(tmp_path):
    # all held to the same answers on vLLM-shaped bodies read at awkward splits and on the
    # fuzz target's bodies
    from latscope import _native

    searches = _searches(tmp_path)
    sse2, scalar = searches[-2:]
    assert scalar.KEY_SEARCH == "portable"
    if platform.machine() in ("x86_64", "AMD64"):
        assert sse2.KEY_SEARCH == "sse2"
        assert _native.KEY_SEARCH in ("avx512bw", "avx2", "sse2")
    for chat in (False, True):
        events = list(fakeserver._events(chat, 40, 11, True, False))
        body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
        for step in (1, 7, 100, len(body)):
            reads = [(i, body[i:i + step]) for i in range(0, len(body), step)]
            answer = scalar.scan_stream(reads)
            assert answer is not None and len(answer[0]) == 40
            assert all(search.scan_stream(reads) == answer for search in searches)

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(fuzztargets.chunked_reads())
    def same(reads):
        answer = scalar.scan_stream(reads)
        assert all(search.scan_stream(reads) == answer for search in searches)

    same()


def test_a_key_is_found_at_every_place_in_an_event(tmp_path):
    # the SIMD searches test 16 or 32 places at once and the event's end by a block that
    # overlaps the one before: a key (or a role that unmarks it) at any offset, in events of
    # any length around those widths, must be found exactly as the exact reader finds it
    from latscope.load import response
    from latscope.model import RequestRecord

    searches = _searches(tmp_path)
    marks = [b'"text":"a"', b'"content" : "a"', b'"reasoning_content":"a"', b'"reasoning":"a"',
             b'"role":"x","content":"a"', b'"created":"a"', b'"text" :1', b'"tex":"a"']
    seen = set()
    for mark in marks:
        for before in range(0, 70):
            event = b'data: {"i":"' + b"y" * before + b'",' + mark + b"}"
            for after in (b"", b',"z":"' + b"w" * (before % 37) + b'"'):
                ev = event[:-1] + after + b"}"
                events = [ev, b"data: [DONE]"]
                body = b"".join(b"%x\r\n%s\n\n\r\n" % (len(e) + 2, e) for e in events)
                reads = [(5, body + b"0\r\n\r\n")]
                exact = RequestRecord(index=0, request_id="r", scheduled_ns=0)
                assert response._read_stream(exact, response.dechunk(reads)) is None
                seen.add(len(exact.chunk_ns))
                for search in searches:
                    times, _ = search.scan_stream(reads)
                    assert len(times) == len(exact.chunk_ns), (mark, before, search.KEY_SEARCH)
    assert seen == {0, 1}  # token events and events that are not


def test_events_are_read_where_chunks_cut_them(tmp_path):
    # the pass reads each chunk's events in place when every chunk holds whole events (a
    # server's write of one or more), and the de-chunked copy where a chunk ends inside an
    # event (a proxy that re-chunks): both, in all three searches, answer as the exact reader
    from latscope.load import response
    from latscope.model import RequestRecord

    searches = _searches(tmp_path)
    for chat in (False, True):
        events = list(fakeserver._events(chat, 30, 7, True, False))  # each ends "\n\n"
        data = b"".join(events[:-1])  # [DONE] stays whole in the last chunk, which the pass
        for size in (1, 2, 5, 33, 64, 200, len(data) // 2, len(data)):  # needs (else: declined)
            chunks = [data[i:i + size] for i in range(0, len(data), size)] + events[-1:]
            body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
            for step in (3, 64, len(body)):
                reads = [(1000 + i, body[i:i + step]) for i in range(0, len(body), step)]
                exact = RequestRecord(index=0, request_id="r", scheduled_ns=0)
                assert response._read_stream(exact, response.dechunk(reads)) is None
                assert len(exact.chunk_ns) == 30
                for search in searches:
                    times, tail = search.scan_stream(reads)
                    assert times == exact.chunk_ns, (chat, size, step, search.KEY_SEARCH)
                    assert tail.endswith(b"data: [DONE]\n\n") and tail.count(b"\n\n") == 3


def test_the_head_before_the_body_is_skipped_in_place():
    # the client keeps a read that brought the HTTP head and the body together whole (slicing
    # the head off copied the body) and tells the pass where the body starts
    from latscope import _native, fastread

    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    events = list(fakeserver._events(False, 20, 5, True, False))
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    for step in (7, 100, len(body)):
        reads = [(10 + i, body[i:i + step]) for i in range(0, len(body), step)]
        with_head = [(reads[0][0], head + reads[0][1]), *reads[1:]]
        assert _native.scan_stream(with_head, len(head)) == _native.scan_stream(reads)
        assert _native.scan_stream(with_head) is None  # the head is not a chunk
        if step == len(body):  # (the pure-Python twin declines marks split across reads)
            twin = fastread.scan_stream(with_head, len(head))
            assert twin is not None and twin[0] == _native.scan_stream(reads)[0]
    assert _native.scan_stream([(1, head)], len(head) + 1) is None  # past the read: declined
    with pytest.raises(ValueError):
        _native.scan_stream([(1, head)], -1)


def _gaps_by_the_store(times):
    """The gaps of one request's token times as the C store keeps them (``add_times``)."""
    from latscope import _native

    if len(times) < 2:
        return None
    store = _native.GapStore(len(times))
    assert store.add_times(times)
    return store.values(), store.total, store.total_sq, store.lo, store.hi


def test_json_gaps_reads_a_lines_times_as_the_store_reads_the_ints():
    # a run's lines are read back without decoding their token times (written as gaps): what
    # json_gaps reads from the text must be what the gap store takes from the times
    # themselves, bit for bit, and any text that is not a plain JSON list of ints up to 18
    # digits must be declined (None)
    import dataclasses

    import orjson
    from hypothesis import strategies as st

    from latscope import _native
    from latscope.model import RequestRecord, gaps_of_times

    def expected(times):
        return _gaps_by_the_store(times)

    # times whose gaps fit 18 digits (a longer one is declined, below)
    ints = st.one_of(st.integers(-4 * 10**17, 4 * 10**17), st.integers(0, 99),
                     st.sampled_from([10**13, 10**13 + 1, 10**12 + 5, -7]))
    keys = tuple(f.name for f in dataclasses.fields(RequestRecord))
    line_keys = tuple("chunk_gaps_ns" if k == "chunk_ns" else k for k in keys)

    @settings(max_examples=500, deadline=None, database=None, derandomize=True)
    @given(st.lists(ints, max_size=40), st.booleans())
    def same(times, repeats):
        if repeats:  # the tokens of one read share a time object
            times = [t for t in times for _ in range(3)]
        record = RequestRecord(index=1, request_id="r", scheduled_ns=0, chunk_ns=times)
        c_line = _native.record_line(line_keys, tuple(getattr(record, k) for k in keys),
                                     keys.index("chunk_ns"))
        for text in (orjson.dumps({"i": 1, "chunk_gaps_ns": gaps_of_times(times), "x": [2]}),
                     c_line):
            start, end, gaps = _native.json_gaps(text)
            assert text[start - 1:end + 1] == orjson.dumps(gaps_of_times(times))
            assert gaps == expected(times)

    same()
    past_2_63 = b",".join([b"900000000000000000"] * 11)
    for bad in (b'{"chunk_gaps_ns":[1,]}', b'{"chunk_gaps_ns":[01,2]}',
                b'{"chunk_gaps_ns":[1.5,2]}', b'{"chunk_gaps_ns":[1, 2]}',
                b'{"chunk_gaps_ns":[-]}', b'{"chunk_gaps_ns":[1,2', b'{"chunk_gaps_ns":["1"]}',
                b'{"chunk_gaps_ns":[1234567890123456789,1]}',
                b'{"chunk_gaps_ns":[1,1234567890123456789]}',
                b'{"chunk_gaps_ns":[' + past_2_63 + b']}',
                b'{"chunk_ns":[1,2]}', b'{"x":[1,2]}'):  # schema 1's times: decoded whole
        assert _native.json_gaps(bad) is None, bad


def test_the_c_part_is_clean_under_address_and_undefined_behaviour_sanitizers():
    # scripts/sanitize_native.py builds _native.c with ASan + UBSan (both key searches) and
    # feeds it fuzzed, random, cut and wrongly typed input; it found a signed overflow in the
    # ITL gaps at the int64 edges (now the wrapping difference numpy takes)
    script = Path(__file__).resolve().parents[2] / "scripts" / "sanitize_native.py"
    done = subprocess.run([sys.executable, str(script), "--examples", "200"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode == 2:
        pytest.skip("no C compiler with AddressSanitizer here")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def test_a_list_of_ints_is_written_as_orjson_writes_it_as_times_or_gaps():
    # a record's lists of ints go into its requests.jsonl line as this text, its token times
    # as gaps (~5 kB of 13-digit times a 256-token record read at once, ~0.6 kB of gaps): it
    # must be orjson's own text of the list (of its gaps) for every int64, shared time objects
    # (the tokens of one read) included, and None for anything orjson writes otherwise
    import orjson
    from hypothesis import strategies as st

    from latscope import _native

    def by_c(ints, as_gaps):
        return _native.record_line(("x",), (ints,), 0 if as_gaps else -1)

    def by_orjson(ints, as_gaps):
        gaps = [b - a for a, b in zip(ints, ints[1:])]
        return orjson.dumps({"x": ints[:1] + gaps if as_gaps else ints},
                            option=orjson.OPT_APPEND_NEWLINE)

    def same_or_declined(ints, as_gaps):
        gaps = [b - a for a, b in zip(ints, ints[1:])] if as_gaps else []
        if any(not -2**63 <= g < 2**63 for g in gaps):  # past int64 (orjson takes a uint64)
            assert by_c(ints, as_gaps) is None
        else:
            assert by_c(ints, as_gaps) == by_orjson(ints, as_gaps)

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=40), st.integers(1, 5))
    def same(values, share):
        shared = [v for v in values for _ in range(share)]  # one object, several tokens
        for ints in (values, shared):
            for as_gaps in (False, True):
                same_or_declined(ints, as_gaps)

    same()

    # times written from the one before where both are positive (only the digits that
    # differ), so steps that cross a power of ten up and down, zeros and signs
    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(st.sampled_from([0, 1, 9, 10**6 - 3, 10**15 - 40, 2**63 - 300]),
           st.lists(st.integers(-60, 60), max_size=60))
    def steps(origin, deltas):
        ints, value = [], origin
        for delta in deltas:
            value = max(-2**63, min(2**63 - 1, value + delta))
            ints.append(value)
        for as_gaps in (False, True):
            same_or_declined(ints, as_gaps)

    steps()
    for declined in ([2**63], [-2**63 - 1], [True], [1.0], [1, "2"], [None]):
        for as_gaps in (False, True):
            assert by_c(declined, as_gaps) is None
    assert by_c([2**63 - 1, -2], True) is None  # the gap is past 64 bits
    assert by_c(7, True) is None  # token times that are not a list
    with pytest.raises(TypeError):
        _native.record_line(("x",), ((1, 2),), "0")


def test_gaps_of_time_objects_shared_by_tokens_equal_numpys():
    # scan_stream gives the tokens of one read the same int object; the gap store converts
    # each object once: the gaps must be numpy's whatever the sharing
    import numpy as np

    base = 10**15
    reads = [base, base + 7_000_001, base + 7_000_001 + 123, base + 2**40]
    times = [reads[0]] * 3 + [reads[1]] * 4 + [reads[2]] + [reads[1]] + [reads[3]] * 2
    f32, total, total_sq, lo, hi = _gaps_by_the_store(times)
    gaps = np.diff(np.asarray(times, dtype=np.int64)) / 1e6
    assert bytes(f32) == gaps.astype(np.float32).tobytes()
    assert (lo, hi) == (gaps.min(), gaps.max())
    assert total == pytest.approx(gaps.sum(), rel=1e-12)
    assert total_sq == pytest.approx(np.square(gaps).sum(), rel=1e-12)


def test_a_record_line_is_byte_for_byte_what_orjson_writes():
    # every request's requests.jsonl line is written by the C part where it is built: it must
    # be orjson's own line for every record (its token times as gaps), or None (then orjson
    # writes it), it must read back as the record, and the usual record must take the C path
    # (else the ceiling silently loses it)
    import dataclasses

    import orjson
    from hypothesis import strategies as st

    from latscope import _native, rundir
    from latscope.model import RequestRecord

    text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
        ["", "latscope-1a2b3c4d-7", 'a "quoted" one', "back\\slash", "tab\there", "é ü 漢字 🙂",
         "line\nbreak", "\x00", "\x1f", "\x7f", "lone \ud800"])
    ints = st.integers(-2**63, 2**63 - 1) | st.sampled_from([2**63, -2**63 - 1, 0, -1])
    maybe_int = st.none() | ints
    server = st.just({}) | st.dictionaries(st.sampled_from(["metrics", "id"]),
                                           st.integers(0, 9) | st.text(max_size=4), max_size=2)
    records = st.builds(
        RequestRecord, index=ints, request_id=text, scheduled_ns=ints, sent_ns=ints,
        headers_ns=maybe_int, first_token_ns=maybe_int, end_ns=maybe_int,
        chunk_ns=st.lists(ints, max_size=30) | st.lists(st.just(1_700_000_000_123_456), max_size=5),
        chunk_tokens=st.lists(ints, max_size=3), prompt_tokens=maybe_int,
        output_tokens=maybe_int, output_tokens_source=st.sampled_from(["usage", "counted"]),
        expected_output_tokens=maybe_int, status=st.none() | st.integers(100, 599),
        error_kind=st.none() | text, error=st.none() | text, warmup=st.booleans(),
        open_loop=st.booleans(), trace_id=st.none() | st.just("0af7651916cd43dd8448eb211c80319c"),
        group=text, server=server)
    keys = tuple(f.name for f in dataclasses.fields(RequestRecord))
    line_keys = tuple("chunk_gaps_ns" if k == "chunk_ns" else k for k in keys)
    gaps_at = keys.index("chunk_ns")

    def c_line(record):
        return _native.record_line(line_keys, tuple(getattr(record, k) for k in keys), gaps_at)

    def orjson_line(record):
        times = record.chunk_ns
        gaps = times[:1] + [b - a for a, b in zip(times, times[1:])]
        fields = {("chunk_gaps_ns" if k == "chunk_ns" else k): gaps if k == "chunk_ns" else v
                  for k, v in record.to_dict().items()}
        return orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE)

    @settings(max_examples=400, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(records)
    def same(record):
        try:
            expected = orjson_line(record)
        except orjson.JSONEncodeError:  # a 65-bit int: orjson refuses it, the C part declines
            assert c_line(record) is None
            return
        line = c_line(record)
        assert line is None or line == expected
        assert rundir.record_line(record) == expected
        assert RequestRecord.from_dict(orjson.loads(expected)) == record

    same()
    usual = RequestRecord(index=3, request_id="latscope-1a2b3c4d-3", scheduled_ns=10, sent_ns=11,
                          headers_ns=12, first_token_ns=1_700_000_000_123_456, end_ns=19,
                          chunk_ns=[1_700_000_000_123_456] * 256, prompt_tokens=16,
                          output_tokens=256, output_tokens_source="usage", status=200, group="")
    line = c_line(usual)
    assert line == orjson_line(usual)
    assert len(line) < 1000  # 256 times of one read: the first, then 255 gaps of 0 (~5.4 kB as times)
    with pytest.raises(TypeError):
        _native.record_line(keys, (1, 2))
