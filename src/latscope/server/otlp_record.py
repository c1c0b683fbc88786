"""The spans of one run: ``SpanRecorder`` keeps what a ``SpanCollector`` receives during a run in
its run directory, and ``read_spans`` reads them back.

During the run the recorder appends each body, raw, to ``RUN/spans.raw`` as it arrives; when the
run stops it decodes them into ``RUN/spans.jsonl`` (one JSON object per span), waits briefly for
late spans (decoded as they come), removes ``spans.raw`` and writes ``RUN/otlp.json`` (counts, the
receiver's own cost).

Nothing here runs on the load generator's event loop, but threads share its GIL. Checking a body
is OTLP is cheap; turning spans into Python dicts is not (~85 us a span), and in a receiver
thread it made the 10 ms-timer loop lag p99 go from 5.8 to 13 ms at 100 spans/s and to 43 ms at
2000 spans/s. So, like the ``/metrics`` scraper, the recorder defers that work until no request
is in flight (``benchmarks/otlp_overhead.py`` measures both). A run killed before its end keeps
``spans.raw``; ``read_spans`` decodes it then.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson

from latscope.model import RunContext
from latscope.server.otlp import SpanCollector
from latscope.server.otlp_decode import Span, decode_export_request

SPANS_FILE = "spans.jsonl"
RAW_FILE = "spans.raw"  # during a run: (received unix ns, length, body) frames
STATUS_FILE = "otlp.json"
_FRAME = struct.Struct("<qI")  # received unix ns, body length
_ENCODER, _DECODER = msgspec.json.Encoder(), msgspec.json.Decoder(Span)


class SpanRecorder:
    """A ``RunObserver``: keeps the spans a collector receives during one run in its run dir.

    During the run, bodies are only appended to ``spans.raw`` (see the module doc for why); at
    ``stop`` they are decoded into ``spans.jsonl``. Spans come in batches some time after their
    request ended (vLLM's ``BatchSpanProcessor`` exports every ``OTEL_BSP_SCHEDULE_DELAY`` ms,
    5000 by default), so ``stop`` keeps listening until every trace id passed to ``expect`` has
    arrived, or, when none were passed, until no span came for ``quiet_s`` -- never longer than
    ``max_wait_s``. The decoding and the wait run in a worker thread.
    """

    def __init__(self, collector: SpanCollector, *, max_wait_s: float = 8.0,
                 quiet_s: float = 1.5) -> None:
        self.collector = collector
        self.max_wait_s = max_wait_s
        self.quiet_s = quiet_s
        self.spans = 0
        self.bodies = 0
        self.waited_s = 0.0
        self.decode_ms = 0.0
        self._expected: set[str] = set()
        self._seen: set[str] = set()
        self._raw: Any = None
        self._out: Any = None
        self._live = False  # after the run: decode bodies as they come
        self._last_ns = 0
        self._cond = threading.Condition()

    def expect(self, trace_id: str | None) -> None:
        """Note a trace id whose span should arrive before the run's files are closed."""
        if trace_id:
            with self._cond:
                self._expected.add(trace_id)

    def _sink(self, received_ns: int, body: bytes) -> None:
        # A receiver thread. During the run: one write, no decoding (it would hold the GIL).
        with self._cond:
            if self._live and self._out is not None:
                self._decode(received_ns, body)
            elif self._raw is not None:
                self._raw.write(_FRAME.pack(received_ns, len(body)) + body)
                self._raw.flush()
            else:
                return
            self.bodies += 1
            self._last_ns = time.monotonic_ns()
            self._cond.notify_all()

    def _decode(self, received_ns: int, body: bytes) -> None:
        t0 = time.perf_counter()
        spans = decode_export_request(body, received_unix_ns=received_ns)
        self._out.write(b"".join(_ENCODER.encode(s) + b"\n" for s in spans))
        self._out.flush()
        self.spans += len(spans)
        self._seen.update(s.trace_id for s in spans)
        self.decode_ms += (time.perf_counter() - t0) * 1e3

    async def start(self, ctx: RunContext) -> None:
        self._raw = open(ctx.run_dir / RAW_FILE, "wb")  # noqa: SIM115 (closed in stop)
        self._out = open(ctx.run_dir / SPANS_FILE, "wb")  # noqa: SIM115
        self._last_ns = time.monotonic_ns()
        self.collector.add_sink(self._sink)

    async def stop(self, ctx: RunContext) -> None:
        try:
            self.waited_s = await asyncio.to_thread(self._finish, ctx.run_dir)
        finally:
            self.collector.remove_sink(self._sink)
            with self._cond:
                for f in (self._raw, self._out):
                    if f is not None:
                        f.close()
                self._raw = self._out = None
            self._write_status(ctx.run_dir)

    def _finish(self, run_dir: Path) -> float:
        """Decode what came during the run, then wait for late spans, decoding them live."""
        t0 = time.monotonic()
        with self._cond:
            self._raw.close()
            self._raw = None
            for received_ns, body in _frames(run_dir / RAW_FILE):
                self._decode(received_ns, body)
            self._live = True
            (run_dir / RAW_FILE).unlink(missing_ok=True)
            deadline = t0 + self.max_wait_s
            while True:
                now = time.monotonic()
                if self._expected:
                    if self._expected <= self._seen:
                        break
                elif now - self._last_ns / 1e9 >= self.quiet_s:
                    break
                if now >= deadline:
                    break
                self._cond.wait(timeout=min(0.1, deadline - now))
        return time.monotonic() - t0

    def status(self) -> dict[str, Any]:
        c = self.collector
        with self._cond:
            missing = len(self._expected - self._seen)
        handle = sorted(c.handle_ms)
        return {
            "endpoint": c.http_endpoint, "grpc_endpoint": c.grpc_endpoint,
            "spans": self.spans, "bodies": self.bodies, "expected_traces": len(self._expected),
            "expected_missing": missing, "waited_after_run_s": round(self.waited_s, 3),
            "decode_ms_after_run": round(self.decode_ms, 3),
            "collector_requests": c.requests, "collector_bytes": c.bytes,
            "rejected_requests": c.rejected, "errors": list(c.errors),
            "handle_ms": {"mean": sum(handle) / len(handle) if handle else None,
                          "max": handle[-1] if handle else None},
        }

    def _write_status(self, run_dir: Path) -> None:
        (run_dir / STATUS_FILE).write_bytes(orjson.dumps(self.status(),
                                                         option=orjson.OPT_INDENT_2))


def _frames(path: Path) -> Iterable[tuple[int, bytes]]:
    """The (received unix ns, body) frames of a ``spans.raw``; a torn last frame is dropped."""
    if not path.is_file():
        return
    data = path.read_bytes()
    pos = 0
    while pos + _FRAME.size <= len(data):
        received, length = _FRAME.unpack_from(data, pos)
        start = pos + _FRAME.size
        if start + length > len(data):
            return
        yield received, data[start:start + length]
        pos = start + length


def read_spans(run_dir: str | Path) -> list[Span]:
    """The spans of a run directory (``spans.jsonl``, and ``spans.raw`` if the run was killed
    before it stopped); [] when it has none. A torn last line is skipped; a torn line mid-file
    is an error."""
    return list(iter_spans(run_dir))


def iter_spans(run_dir: str | Path) -> Iterator[Span]:
    """``read_spans``' spans one at a time: ``spans.jsonl`` is read a line at a time, so that
    a long run's spans are never all held (the join keeps only each one's timings)."""
    from latscope.errors import LatscopeError
    from latscope.rundir import jsonl_lines

    path = Path(run_dir) / SPANS_FILE
    # A run killed before its stop left its bodies undecoded
    for received_ns, body in _frames(Path(run_dir) / RAW_FILE):
        yield from decode_export_request(body, received_unix_ns=received_ns)
    for number, line, last in jsonl_lines(path):
        try:
            yield _DECODER.decode(line)
        except msgspec.ValidationError as exc:
            raise LatscopeError(f"{path}: line {number} is not a span latscope wrote "
                                f"({exc})") from None
        except msgspec.DecodeError:
            if last:
                return
            raise LatscopeError(f"{path}: line {number} is not JSON") from None
