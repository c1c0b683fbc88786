"""An OTLP trace receiver inside latscope: the server's own per-request record, as it arrives.

vLLM started with ``--otlp-traces-endpoint`` exports one ``llm_request`` span per finished request
(``vllm/v1/engine/output_processor.py``, ``do_tracing``) whose attributes hold its queue, prefill,
decode and TTFT in seconds. When the client sent a W3C ``traceparent`` header, that span carries
the client's trace id, which is how ``latscope.analysis.join`` pairs it with the client's record.

- ``SpanCollector`` (here): listens for OTLP/HTTP protobuf (``POST /v1/traces``, gzip/deflate
  bodies accepted) on a ``ThreadingHTTPServer`` in its own thread and, optionally, OTLP/gRPC
  (``grpcio``, a thread pool). It lives for a whole session, so that its address is known before
  the server it listens to starts, and hands each valid request body to the sinks open at that
  moment. It only checks that a body is OTLP (``ParseFromString``, upb's C parser: ~4 us a span).
- ``latscope.server.otlp_record.SpanRecorder``: a run's view of a collector, which keeps the
  bodies and decodes them (``latscope.server.otlp_decode``) once no request is in flight.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import socket
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from latscope.errors import ConfigError
from latscope.server.otlp_decode import parse_export_request

TRACES_PATH = "/v1/traces"
_MAX_BODY = 64 << 20  # an OTLP batch of 512 vLLM spans is ~300 kB; refuse absurd bodies

# Called with (received unix ns, a valid serialized ExportTraceServiceRequest), in a receiver thread
SpanSink = Callable[[int, bytes], None]


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
            parse_export_request(body)
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
