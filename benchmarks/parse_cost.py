"""CPU cost of reading one finished streamed response (``latscope.load.response.finalize``).

The per-response parse is most of latscope's own CPU per token (``client_ceiling.py``), so this
times it alone, in CPU time (``time.process_time``: a contended box slows wall time, not this),
on streamed bodies shaped like vLLM's: a completions stream and a chat stream (role event first,
usage event last) of ``--tokens`` tokens, one HTTP chunk per event, received either one read
per event (a slow server) or in one read (a fast one). With ``--against REV`` the same bodies
are also read by ``response.py`` as it is at git revision REV, with REV's ``_native.c``
compiled here where both exist (``cc``), the two alternated round by round;
the figure is the median over rounds of the mean µs per response. Where the C pass
(``_native.c``) is built, the current build is timed twice: with it (``current``) and with the
pure-Python fast reader it replaces (``python``), as a build without a compiler reads. Usage::

    python3 benchmarks/parse_cost.py [--tokens 256] [--rounds 15] [--against HEAD~1]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from latscope.load import response as current  # noqa: E402
from latscope.load.client import _Exchange  # noqa: E402
from latscope.model import RequestRecord  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ID = "cmpl-8f2c1e0b5a9d4e6f8a7b3c2d1e0f9a8b"


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _events(chat: bool, tokens: int) -> list[bytes]:
    """vLLM's OpenAI server's field order and compact JSON (tokens are short words)."""
    head = {"id": ID, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1733140000, "model": MODEL}
    out = []
    if chat:
        out.append(_event({**head, "choices": [{"index": 0, "delta": {
            "role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}))
    for i in range(tokens):
        last = "length" if i == tokens - 1 else None
        if chat:
            choice = {"index": 0, "delta": {"content": f" word{i}"}, "logprobs": None,
                      "finish_reason": last}
        else:
            choice = {"index": 0, "text": f" word{i}", "logprobs": None, "finish_reason": last,
                      "stop_reason": None}
        out.append(_event({**head, "choices": [choice]}))
    out.append(_event({**head, "choices": [], "usage": {
        "prompt_tokens": 128, "total_tokens": 128 + tokens, "completion_tokens": tokens}}))
    out.append(b"data: [DONE]\n\n")
    return out


def _reads(events: list[bytes], one_read: bool) -> list[tuple[int, bytes]]:
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    chunks[-1] += b"0\r\n\r\n"
    if one_read:
        return [(1000, b"".join(chunks))]
    return [(1000 * (i + 1), c) for i, c in enumerate(chunks)]


def _exchange(reads: list[tuple[int, bytes]], loop: asyncio.AbstractEventLoop) -> _Exchange:
    ex = _Exchange(loop.create_future())
    # the head in a read of its own (as vLLM's server writes it): the body's reads are then the
    # exchange's own, which every revision's reader (--against) takes alike
    ex.feed(reads[0][0], b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    for ns, data in reads:
        ex.feed(ns, data)
    assert ex.future.done(), "the body did not end"
    return ex


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _native_at(rev: str, folder: Path) -> ModuleType | None:
    """REV's ``_native.c`` compiled into ``folder``, or None (no C part at REV, no compiler)."""
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/latscope/_native.c"],
                           capture_output=True)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if shown.returncode or compiler is None:
        return None
    (folder / "_native.c").write_bytes(shown.stdout)
    built = folder / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-I" + sysconfig.get_paths()["include"],
                    str(folder / "_native.c"), "-o", str(built)], check=True)
    return _load("_native", built)


def _module_at(rev: str) -> ModuleType:
    """``response.py`` at REV, reading with REV's C pass where it has one and a compiler is
    here (else with this build's)."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/latscope/load/response.py"],
                          check=True, capture_output=True).stdout
    folder = Path(tempfile.mkdtemp())
    (folder / "response_at_rev.py").write_bytes(text)
    module = _load("response_at_rev", folder / "response_at_rev.py")
    native = _native_at(rev, folder) if getattr(module, "_native", None) is not None else None
    if native is not None:
        module._native = native  # _read_stream_c looks it up at each call
    print(f"{rev}: response.py with {'its own' if native else 'this build' + chr(39) + 's'} "
          "C pass" if getattr(module, "_native", None) is not None else f"{rev}: no C pass")
    return module


def _time(finalize: Callable[..., None], ex: _Exchange, n: int) -> tuple[float, RequestRecord]:
    # the module's quick reader as this arm reads (``finalize`` looks it up per call)
    current.read_stream_quick = _QUICK.get(finalize, _QUICK_AS_BUILT)
    t0 = time.process_time()
    for _ in range(n):
        record = RequestRecord(index=0, request_id="x", scheduled_ns=0)
        finalize(record, ex, True)
    return (time.process_time() - t0) / n * 1e6, record


_QUICK_AS_BUILT = current.read_stream_quick


def _python_reader(record: RequestRecord, ex: _Exchange, stream: bool) -> None:
    current.finalize(record, ex, stream)


_QUICK: dict[Callable[..., None], Callable[..., bool]] = {
    _python_reader: current._read_stream_fast}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=300, help="responses timed per round")
    ap.add_argument("--against", metavar="REV", help="also time response.py at this git rev")
    args = ap.parse_args()
    arms = {"current": current.finalize}
    if current.STREAM_PARSER == "c":
        arms["python"] = _python_reader
    if args.against:
        arms[args.against] = _module_at(args.against).finalize
    loop = asyncio.new_event_loop()
    print(f"CPU us per response (median of {args.rounds} rounds x {args.per_round}), "
          f"{args.tokens} tokens")
    print(f"{'body':<26}{'bytes':>7}" + "".join(f"{a:>12}" for a in arms))
    for chat in (False, True):
        for one_read in (False, True):
            reads = _reads(_events(chat, args.tokens), one_read)
            ex = _exchange(reads, loop)
            samples: dict[str, list[float]] = {a: [] for a in arms}
            records = {}
            for _ in range(args.rounds):  # arms alternated round by round
                for arm, fin in arms.items():
                    us, records[arm] = _time(fin, ex, args.per_round)
                    samples[arm].append(us)
            for arm, r in records.items():  # every arm read the same tokens, no failure
                assert r.error is None and len(r.chunk_ns) == args.tokens, (arm, r.error)
            name = ("chat" if chat else "completions") + (", one read" if one_read
                                                          else ", read per event")
            size = sum(len(d) for _, d in reads)
            print(f"{name:<26}{size:>7}"
                  + "".join(f"{statistics.median(samples[a]):>12.1f}" for a in arms))
    loop.close()


if __name__ == "__main__":
    main()
