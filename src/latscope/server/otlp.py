"""An OTLP trace receiver inside latscope: the server's own per-request record, as it arrives.

vLLM started with ``--otlp-traces-endpoint`` exports one ``llm_request`` span per finished request
(``vllm/v1/engine/output_processor.py``, ``do_tracing``) whose attributes hold its queue, prefill,
decode and TTFT in seconds. When the client sent a W3C ``traceparent`` header, that span carries
the client's trace id, which is how ``latscope.analysis.join`` pairs it with the client's record.

- ``SpanCollector``: listens for OTLP/HTTP protobuf (``POST /v1/traces``, gzip/deflate bodies
  accepted) on a ``ThreadingHTTPServer`` in its own thread and, optionally, OTLP/gRPC (``grpcio``,
  a thread pool). It lives for a whole session, so that its address is known before the server
  it listens to starts, and hands each valid request body to the sinks open at that moment.
- ``SpanRecorder``: a ``RunObserver`` view of a collector for one run. During the run it appends
  each body, raw, to ``RUN/spans.raw`` as it arrives; when the run stops it decodes them into
  ``RUN/spans.jsonl`` (one JSON object per span), waits briefly for late spans (decoded as they
  come), removes ``spans.raw`` and writes ``RUN/otlp.json`` (counts, the receiver's own cost).

Nothing here runs on the load generator's event loop, but threads share its GIL. Checking a body
is OTLP (``ParseFromString``, upb's C parser: ~4 us a span) is cheap; turning spans into Python
dicts is not (~85 us a span), and in a receiver thread it made the 10 ms-timer loop lag p99 go
from 5.8 to 13 ms at 100 spans/s and to 43 ms at 2000 spans/s. So, like the ``/metrics``
scraper, the recorder defers that work until no request is in flight
(``benchmarks/otlp_overhead.py`` measures both). A run killed before its end keeps
``spans.raw``; ``read_spans`` decodes it then.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.server
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from latscope.errors import ConfigError
from latscope.model import RunContext

SPANS_FILE = "spans.jsonl"
RAW_FILE = "spans.raw"  # during a run: (received unix ns, length, body) frames
STATUS_FILE = "otlp.json"
TRACES_PATH = "/v1/traces"
_MAX_BODY = 64 << 20  # an OTLP batch of 512 vLLM spans is ~300 kB; refuse absurd bodies
_KIND = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}

_FRAME = struct.Struct("<qI")  # received unix ns, body length
# Called with (received unix ns, a valid serialized ExportTraceServiceRequest), in a receiver thread
SpanSink = Callable[[int, bytes], None]


# -- decoding ----------------------------------------------------------------------------------
def _any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain Python value."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def _attributes(kvs: Iterable[Any]) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


def _parse(body: bytes) -> Any:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise ValueError(f"not an OTLP ExportTraceServiceRequest: {exc}") from None
    return request


def decode_export_request(body: bytes, *, received_unix_ns: int | None = None
                          ) -> list[dict[str, Any]]:
    """Decode an ``ExportTraceServiceRequest`` (protobuf bytes) into one dict per span.

    Keys: ``trace_id``/``span_id``/``parent_span_id`` (lower-case hex, "" when absent), ``name``,
    ``kind``, ``start_unix_ns``, ``end_unix_ns``, ``attributes``, ``resource`` (resource
    attributes), ``scope`` and ``received_unix_ns``. Raises ``ValueError`` for bytes that are
    not such a message.
    """
    return spans_from_request(_parse(body), received_unix_ns=received_unix_ns)


def spans_from_request(request: Any, *, received_unix_ns: int | None = None
                       ) -> list[dict[str, Any]]:
    received = received_unix_ns if received_unix_ns is not None else time.time_ns()
    out = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                out.append({
                    "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(), "name": span.name,
                    "kind": _KIND.get(span.kind, str(span.kind)),
                    "start_unix_ns": span.start_time_unix_nano,
                    "end_unix_ns": span.end_time_unix_nano,
                    "attributes": _attributes(span.attributes),
                    "resource": resource, "scope": scope, "received_unix_ns": received,
                })
    return out


def _inflate(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    raise ValueError(f"unsupported content-encoding {encoding!r}")


def parse_listen(text: str, *, default_port: int = 4318) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` = loopback, port 0 = any free port) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"bad listen address {text!r}: use HOST:PORT, e.g. "
                          "127.0.0.1:4318") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"bad port in {text!r}")
    return host, number


# -- the collector -----------------------------------------------------------------------------
class SpanCollector:
    """Receives OTLP traces over HTTP (and gRPC when ``grpc_listen`` is given) in its own threads.

    ``start()`` binds (port 0 picks a free port; ``http_endpoint`` then says which) and returns
    at once. Every valid request body goes to the sinks open at that moment (``add_sink``).
    Counters: ``requests``, ``bytes``, ``rejected`` (bodies that were not OTLP), ``handle_ms``
    (time spent checking and dispatching a body, the receiver's own cost per request).
    """

    def __init__(self, listen: str = "127.0.0.1:0", grpc_listen: str | None = None) -> None:
        self.host, self.port = parse_listen(listen)
        self.grpc_address = parse_listen(grpc_listen, default_port=4317) if grpc_listen else None
        self.grpc_port: int | None = None
        self.requests = 0
        self.bytes = 0
        self.rejected = 0
        self.handle_ms: list[float] = []
        self.errors: list[str] = []
        self._sinks: list[SpanSink] = []
        self._connections: set[Any] = set()  # open keep-alive sockets, closed with the collector
        self._lock = threading.Lock()
        self._http: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._grpc: Any = None

    @property
    def http_endpoint(self) -> str:
        """What to give vLLM's ``--otlp-traces-endpoint`` (with the http/protobuf protocol)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{TRACES_PATH}"

    @property
    def grpc_endpoint(self) -> str | None:
        if self.grpc_address is None or self.grpc_port is None:
            return None
        return f"http://{self.grpc_address[0]}:{self.grpc_port}"

    def start(self) -> SpanCollector:
        handler = _handler_for(self)
        try:
            self._http = http.server.ThreadingHTTPServer((self.host, self.port), handler)
        except OSError as exc:
            raise ConfigError(f"cannot listen for OTLP on {self.host}:{self.port}: "
                              f"{exc.strerror}") from None
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={
            "poll_interval": 0.2}, name="latscope-otlp-http", daemon=True)
        self._thread.start()
        if self.grpc_address is not None:
            self._start_grpc()
        return self

    def _start_grpc(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        try:
            import grpc
        except ImportError:  # a third-party package: optional, only for --otlp-grpc-listen
            raise ConfigError("OTLP/gRPC needs the grpcio package: pip install grpcio "
                              "(or use OTLP/HTTP: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="
                              "http/protobuf)") from None
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pb_grpc

        collector = self

        class _TraceService(pb_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC's name)
                t0 = time.perf_counter()
                collector._dispatch(request.SerializeToString(), t0)
                return pb.ExportTraceServiceResponse()

        assert self.grpc_address is not None
        host, port = self.grpc_address
        self._grpc = grpc.server(ThreadPoolExecutor(max_workers=2,
                                                    thread_name_prefix="latscope-otlp-grpc"))
        pb_grpc.add_TraceServiceServicer_to_server(_TraceService(), self._grpc)
        bound = self._grpc.add_insecure_port(f"{host}:{port}")
        if not bound:
            raise ConfigError(f"cannot listen for OTLP/gRPC on {host}:{port}")
        self.grpc_port = bound
        self._grpc.start()

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
            # shutdown() stops accepting, but a handler thread would go on serving its client's
            # keep-alive connection (the OTLP exporter keeps one): that client's next batches
            # would vanish instead of reaching a new collector on the same port.
            with self._lock:
                connections, self._connections = list(self._connections), set()
            for sock in connections:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self._grpc is not None:
            self._grpc.stop(grace=0.5).wait()
            self._grpc = None

    def __enter__(self) -> SpanCollector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sinks ---------------------------------------------------------------------------------
    def add_sink(self, sink: SpanSink) -> None:
        with self._lock:
            self._sinks.append(sink)

    def remove_sink(self, sink: SpanSink) -> None:
        with self._lock:
            if sink in self._sinks:
                self._sinks.remove(sink)

    def handle_body(self, body: bytes, encoding: str = "") -> None:
        """Check one OTLP/HTTP body and hand it to the sinks. Raises ValueError for a body
        that is not OTLP protobuf (parsed by upb's C parser, not converted: that is deferred)."""
        t0 = time.perf_counter()
        try:
            body = _inflate(body, encoding)
            _parse(body)
        except (ValueError, OSError, zlib.error) as exc:
            with self._lock:
                self.rejected += 1
                if len(self.errors) < 5:
                    self.errors.append(str(exc)[:200])
            raise ValueError(str(exc)) from None
        self._dispatch(body, t0)

    def _dispatch(self, body: bytes, t0: float) -> None:
        received = time.time_ns()
        with self._lock:
            self.requests += 1
            self.bytes += len(body)
            for sink in list(self._sinks):
                sink(received, body)
            self.handle_ms.append((time.perf_counter() - t0) * 1e3)


def _handler_for(collector: SpanCollector) -> type[http.server.BaseHTTPRequestHandler]:
    class _Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the OTLP exporter reuses its connection

        def setup(self) -> None:
            super().setup()
            with collector._lock:
                collector._connections.add(self.connection)

        def finish(self) -> None:
            with collector._lock:
                collector._connections.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != TRACES_PATH:
                return self._reply(404, b"only POST /v1/traces (OTLP traces) is served here")
            length = int(self.headers.get("content-length") or 0)
            if length <= 0 or length > _MAX_BODY:
                return self._reply(400, b"missing or oversized body")
            body = self.rfile.read(length)
            ctype = (self.headers.get("content-type") or "").split(";")[0].strip()
            if ctype != "application/x-protobuf":
                with collector._lock:
                    collector.rejected += 1
                return self._reply(415, b"only application/x-protobuf (OTLP/HTTP protobuf)")
            try:
                collector.handle_body(body, self.headers.get("content-encoding") or "")
            except ValueError as exc:
                return self._reply(400, str(exc).encode()[:200])
            # An empty ExportTraceServiceResponse: zero bytes of protobuf.
            self._reply(200, b"", content_type="application/x-protobuf")

        def _reply(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # no access log on the console of a benchmark

    return _Handler


# -- the per-run view --------------------------------------------------------------------------
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
        self._out.write(b"".join(orjson.dumps(s) + b"\n" for s in spans))
        self._out.flush()
        self.spans += len(spans)
        self._seen.update(s["trace_id"] for s in spans)
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


def read_spans(run_dir: str | Path) -> list[dict[str, Any]]:
    """The spans of a run directory (``spans.jsonl``, and ``spans.raw`` if the run was killed
    before it stopped); [] when it has none. A torn last line is skipped; a torn line mid-file
    is an error."""
    from latscope.errors import LatscopeError

    path = Path(run_dir) / SPANS_FILE
    out = []
    # A run killed before its stop left its bodies undecoded
    for received_ns, body in _frames(Path(run_dir) / RAW_FILE):
        out += decode_export_request(body, received_unix_ns=received_ns)
    if not path.is_file():
        return out
    lines = path.read_bytes().split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            if number >= len(lines) - 1:
                break
            raise LatscopeError(f"{path}: line {number} is not JSON") from None
    return out


def remote_instructions(collector: SpanCollector) -> list[str]:
    """What to add to a remote vLLM so that it sends its spans to this collector."""
    lines = [f"start vLLM with: --otlp-traces-endpoint {collector.http_endpoint}",
             "  and env: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf "
             "OTEL_BSP_SCHEDULE_DELAY=500"]
    if collector.grpc_endpoint:
        lines.append(f"or (gRPC, vLLM's default protocol): --otlp-traces-endpoint "
                     f"{collector.grpc_endpoint}")
    if collector.host in ("127.0.0.1", "localhost", "::1"):
        lines.append("the collector listens on loopback: a server on another host cannot "
                     "reach it (use --otlp-listen 0.0.0.0:PORT)")
    return lines
