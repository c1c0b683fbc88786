"""latscope's optional C part (src/latscope/_native.c) is built where the tests run, and its
portable path answers as its SSE2 one."""

from __future__ import annotations

import importlib.util
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
    from latscope import stats
    from latscope.load import response

    assert response._native is not None, "_native.c is not built: bash scripts/install.sh"
    assert response.STREAM_PARSER == "c" and response.read_stream_quick is response._read_stream_c
    assert stats._native is response._native


def _scalar_build(tmp_path: Path):
    """_native.c built with -DLATSCOPE_NO_SIMD: the key search hosts without SSE2 take."""
    from latscope import _native

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    source = Path(_native.__file__).with_name("_native.c")
    built = tmp_path / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-DLATSCOPE_NO_SIMD",
                    "-I" + sysconfig.get_paths()["include"], str(source), "-o", str(built)],
                   check=True)
    spec = importlib.util.spec_from_file_location("latscope._native", built)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_portable_path_answers_as_the_sse2_one(tmp_path):
    # aarch64 hosts (Grace Hopper) build the scalar key search: held to the built module on
    # vLLM-shaped bodies read at awkward splits and on the fuzz target's bodies
    from latscope import _native

    scalar = _scalar_build(tmp_path)
    for chat in (False, True):
        events = list(fakeserver._events(chat, 40, 11, True, False))
        body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
        for step in (1, 7, 100, len(body)):
            reads = [(i, body[i:i + step]) for i in range(0, len(body), step)]
            answer = scalar.scan_stream(reads)
            assert answer is not None and len(answer[0]) == 40
            assert answer == _native.scan_stream(reads)

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(fuzztargets.chunked_reads())
    def same(reads):
        assert scalar.scan_stream(reads) == _native.scan_stream(reads)

    same()


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


def test_json_ints_writes_what_orjson_writes_and_declines_the_rest():
    # a record's token times go into its requests.jsonl line as this text (orjson took ~8 us
    # for 256 13-digit ints): it must be orjson's own text for every int64, shared time
    # objects (the tokens of one read) included, and None for anything orjson writes otherwise
    import orjson
    from hypothesis import strategies as st

    from latscope import _native

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=40), st.integers(1, 5))
    def same(values, share):
        shared = [v for v in values for _ in range(share)]  # one object, several tokens
        for ints in (values, shared):
            assert _native.json_ints(ints) == orjson.dumps(ints)

    same()
    for declined in ([2**63], [-2**63 - 1], [True], [1.0], [1, "2"], [None]):
        assert _native.json_ints(declined) is None
    with pytest.raises(TypeError):
        _native.json_ints((1, 2))


def test_gaps_of_time_objects_shared_by_tokens_equal_numpys():
    # scan_stream gives the tokens of one read the same int object; gaps_ms converts each
    # object once: the gaps must be numpy's whatever the sharing
    import numpy as np

    from latscope import _native

    base = 10**15
    reads = [base, base + 7_000_001, base + 7_000_001 + 123, base + 2**40]
    times = [reads[0]] * 3 + [reads[1]] * 4 + [reads[2]] + [reads[1]] + [reads[3]] * 2
    f32, total, total_sq, lo, hi = _native.gaps_ms(times)
    gaps = np.diff(np.asarray(times, dtype=np.int64)) / 1e6
    assert bytes(f32) == gaps.astype(np.float32).tobytes()
    assert (lo, hi) == (gaps.min(), gaps.max())
    assert total == pytest.approx(gaps.sum(), rel=1e-12)
    assert total_sq == pytest.approx(np.square(gaps).sum(), rel=1e-12)
