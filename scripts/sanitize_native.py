"""latscope's C part under AddressSanitizer and UndefinedBehaviorSanitizer.

Builds ``src/latscope/_native.c`` four times with ``-fsanitize=address,undefined`` (the key
search this CPU takes, AVX-512BW or AVX2 where it has them; the AVX2 one,
``-DLATSCOPE_NO_AVX512``; the SSE2 one, ``-DLATSCOPE_NO_AVX2``; the portable one,
``-DLATSCOPE_NO_SIMD``) into a temporary folder, then runs itself again with the sanitizer
runtimes preloaded (CPython is not built with them) and feeds every build: the fuzz target's
chunked bodies (they must answer alike), random reads, vLLM-shaped bodies at every split size
and cut anywhere, usage counts in random tails, record lines of random fields, wrong argument
types, and token times at the edges of int64. Any out-of-bounds access, use after free or
undefined behaviour stops it with the sanitizer's report and a non-zero exit.
``tests/unit/test_native.py`` runs it with a few hundred examples; run it longer after changing
the C::

    python3 scripts/sanitize_native.py [--examples 20000]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "src" / "latscope" / "_native.c"
FLAGS = ["-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
         "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]


def _runtime(compiler: str, name: str) -> str | None:
    path = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True,
                          text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def build(folder: Path) -> tuple[list[Path], list[str]]:
    """The four sanitized builds and the runtimes to preload; SystemExit(2) if this host lacks
    a compiler or the runtimes."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    runtimes = [_runtime(compiler, n) for n in ("libasan.so", "libubsan.so")] if compiler else []
    if not compiler or None in runtimes:
        raise SystemExit(2)
    include = "-I" + sysconfig.get_paths()["include"]
    built = []
    for name, extra in (("simd", []), ("avx2", ["-DLATSCOPE_NO_AVX512"]),
                        ("sse2", ["-DLATSCOPE_NO_AVX2"]), ("scalar", ["-DLATSCOPE_NO_SIMD"])):
        out = folder / f"_native_{name}.so"
        subprocess.run([compiler, *FLAGS, *extra, include, str(SOURCE), "-o", str(out)],
                       check=True)
        built.append(out)
    return built, [r for r in runtimes if r]


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("latscope._native", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Alike:
    """The searches between the CPU's own and the portable one (AVX2's where the CPU takes
    AVX-512BW's, SSE2's): their scan_stream, held to one answer among them."""

    def __init__(self, modules: list) -> None:
        self.modules = modules

    def scan_stream(self, *args):
        answers = [m.scan_stream(*args) for m in self.modules]
        assert all(a == answers[0] for a in answers), [m.KEY_SEARCH for m in self.modules]
        return answers[0]


def feed(simd_path: Path, middle_paths: list[Path], scalar_path: Path, examples: int) -> None:
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "unit" / "fuzz")]
    import fuzztargets
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import fakeserver

    simd, scalar = _load(simd_path), _load(scalar_path)
    sse2 = _Alike([_load(path) for path in middle_paths])
    conf = settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))

    @conf
    @given(fuzztargets.chunked_reads())
    def alike(reads):
        assert simd.scan_stream(reads) == sse2.scan_stream(reads) == scalar.scan_stream(reads)

    @conf
    @given(st.lists(st.tuples(st.integers(0, 2**63 - 1), st.binary(max_size=64)), max_size=8))
    def random_reads(reads):
        assert simd.scan_stream(reads) == sse2.scan_stream(reads) == scalar.scan_stream(reads)

    @conf
    @given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=50))
    def edge_times(times):
        store = simd.GapStore(64)
        assert store.add_times(times) and store.count == max(len(times) - 1, 0)

    @conf
    @given(st.integers(0, 40), st.lists(st.lists(st.integers(-2**64, 2**64), max_size=30),
                                        max_size=12))
    def gap_store(cap, requests):
        # grown, refused at the cap, cleared, fed bad items: every write inside its buffer
        store = simd.GapStore(cap)
        for times in requests:
            try:
                if not store.add_times(times):
                    store.clear()
                    store.add_times(times)
            except OverflowError:
                pass
            if len(times) > 1 and all(abs(t) < 2**63 for t in times):
                one = simd.GapStore(len(times))
                one.add_times(times)
                store.add_gaps((one.values(), one.total, one.total_sq, one.lo, one.hi))
            assert 0 <= store.kept <= cap and len(store.values()) == 4 * store.kept
        for wrong in ([1, "x"], (1, 2), None):
            try:
                store.add_times(wrong)
            except (TypeError, OverflowError):
                pass
        for wrong in ((b"abc", 1.0, 1.0, 1.0, 1.0), (b"", 1.0), None):
            try:
                store.add_gaps(wrong)
            except (TypeError, ValueError):
                pass

    @conf
    @given(st.lists(st.one_of(st.integers(-2**70, 2**70), st.booleans(), st.none()), max_size=50),
           st.integers(1, 4))
    def json_text(ints, share):
        ints = [i for i in ints for _ in range(share)]  # shared objects: the tokens of a read
        for gaps_at in (-1, 0):  # as times, as gaps
            text = simd.record_line(("x",), (ints,), gaps_at)
            assert text == scalar.record_line(("x",), (ints,), gaps_at)
            assert text is None or text.count(b",") == max(len(ints) - 1, 0)

    @conf
    @given(st.lists(st.tuples(st.text(max_size=8), st.one_of(
        st.integers(-2**70, 2**70), st.booleans(), st.none(), st.text(max_size=40),
        st.lists(st.integers(-2**64, 2**64), max_size=300), st.dictionaries(st.text(), st.none(),
                                                                            max_size=1),
        st.floats())), max_size=24), st.integers(-2, 24))
    def record_lines(fields, gaps_at):
        import orjson

        keys, values = tuple(k for k, _ in fields), tuple(v for _, v in fields)
        assert simd.record_line(keys, values, gaps_at) == scalar.record_line(keys, values, gaps_at)
        line = simd.record_line(keys, values)
        assert line == scalar.record_line(keys, values)
        if line is not None:  # what orjson writes for the same fields, in the same order
            assert line == orjson.dumps(dict(fields), option=orjson.OPT_APPEND_NEWLINE) or (
                len(set(keys)) < len(keys))  # (a dict keeps one of a repeated key)

    @conf
    @given(st.binary(max_size=80), st.integers(-3, 90), st.integers(-3, 90),
           st.lists(st.integers(-10**19, 10**19), max_size=30))
    def line_gaps(noise, start, end, times):
        array = b"[" + b",".join(b"%d" % t for t in times) + b"]"
        line = noise + b'{"chunk_gaps_ns":' + array + b"}" + noise
        assert simd.json_gaps(line) == scalar.json_gaps(line)
        try:
            simd.json_gaps(noise, start, end)
        except ValueError:
            pass
        for cut in range(0, len(line), 5):  # a line cut anywhere
            assert simd.json_gaps(line[:cut]) == scalar.json_gaps(line[:cut])

    @conf
    @given(st.lists(st.tuples(st.integers(0, 2**63 - 1), st.binary(max_size=64)), max_size=8),
           st.integers(0, 80))
    def skipped_reads(reads, skip):
        assert (simd.scan_stream(reads, skip) == sse2.scan_stream(reads, skip)
                == scalar.scan_stream(reads, skip))

    alike()
    line_gaps()
    skipped_reads()
    random_reads()
    edge_times()
    gap_store()
    json_text()
    record_lines()
    for chat in (False, True):
        events = list(fakeserver._events(chat, 60, 11, True, False))
        body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
        for step in range(1, 200, 3):
            reads = [(i, body[i:i + step]) for i in range(0, len(body), step)]
            assert (simd.scan_stream(reads) == sse2.scan_stream(reads)
                    == scalar.scan_stream(reads) is not None)
        for cut in range(0, len(body), 7):
            for part in (body[:cut], body[cut:]):
                assert (simd.scan_stream([(1, part)]) == sse2.scan_stream([(1, part)])
                        == scalar.scan_stream([(1, part)]))
    for wrong in (None, 5, [1], [(1,)], [(1, "text")], [(1, b"x", 3)], "abc"):
        assert simd.scan_stream(wrong) is None
    for wrong in (None, [1, "x"], [2**70, 1]):
        try:
            simd.GapStore(4).add_times(wrong)
        except (TypeError, OverflowError):
            pass
    for wrong in ((None,), (("x",), ((1, 2),), 0), (("x",), ([1],), "0"), (("x",), ([1],), 2**70),
                  (("x",), ([1],), 0, 1), (("x",), (None,), 0), (("x",), (5,), 0)):
        try:
            simd.record_line(*wrong)
        except (TypeError, OverflowError):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=3000)
    parser.add_argument("--feed", nargs="+", help=argparse.SUPPRESS)  # the preloaded run
    args = parser.parse_args()
    if args.feed:
        paths = [Path(path) for path in args.feed]
        feed(paths[0], paths[1:-1], paths[-1], args.examples)
        print(f"sanitized: no error over {args.examples} examples per strategy")
        return
    with tempfile.TemporaryDirectory() as tmp:
        try:
            builds, runtimes = build(Path(tmp))
        except SystemExit:
            print("no C compiler with AddressSanitizer here", file=sys.stderr)
            raise
        env = {**os.environ, "LD_PRELOAD": ":".join(runtimes),
               "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1",
               "PYTHONPATH": os.pathsep.join([str(REPO / "src"),
                                              os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, __file__, "--examples", str(args.examples),
                               "--feed", *map(str, builds)], env=env)
        raise SystemExit(done.returncode)


if __name__ == "__main__":
    main()
