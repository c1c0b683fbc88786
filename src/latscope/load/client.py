"""A lean streaming HTTP/1.1 client built on ``asyncio.Protocol``, made for timing truth.

Why not aiohttp: measured on the 2-core dev box (``docs/bench.md``), this client's TTFT error at
concurrency 256 is +1.7 ms p50 where a lean aiohttp client adds +92 ms and vllm bench serve +291
ms, and it streams 2-3x the tokens/s of that aiohttp client (6.7-9.7x vllm bench serve's). On every
``data_received`` the
connection takes one ``perf_counter_ns()``, keeps the bytes and checks for the end of the body;
nothing else. De-chunking, SSE framing and the few fields we need (is there content? usage
counts? [DONE]?) are read after the response ended (``latscope.load.response.finalize``), with
byte searches and regexes, never a full JSON decode per chunk.

Connections are kept alive and reused (one per in-flight request); a reused connection that the
server closed while idle is retried once on a fresh one, as HTTP clients do, and never counted as
a failure. A response is judged: HTTP >= 400, a connection lost mid-response, a timeout, bad SSE
framing, non-JSON data, a stream without ``[DONE]`` or an error event all set ``error_kind``, as
do a response head that is not HTTP (a bad ``Content-Length``, a head over 64 KiB) and a response
over ``max_response_bytes`` (cut there). Header values are checked once (no CR, LF or NUL: they
would split the request) and the request head is joined from bytes, never %-formatted, so a
``%`` in a path or a header is sent as it is.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

from latscope.errors import ConfigError
from latscope.load.response import dechunk
from latscope.model import ErrorKind, RequestRecord

_perf_ns = time.perf_counter_ns
_LAST_CHUNK = b"0\r\n\r\n"
_HEADERS_READ = frozenset((b"transfer-encoding", b"content-length", b"connection"))
_MAX_HEAD = 64 << 10  # a response head longer than this is not HTTP we can use
_NO_LIMIT = 1 << 62
_WATCHDOG_TICK_S = 0.05  # how late a request timeout may be noticed, at most


def usual_head(head: bytes) -> int | None:
    """The status of a streaming server's usual response head (chunked framing, kept alive:
    "HTTP/1.1 " or "HTTP/1.0 ", three digits, a space or the line's end; a header line
    "transfer-encoding: chunked" in any case, no "connection" or "content-length" anywhere in
    the headers); None for anything else, which the caller's header loop reads. ~1 us a
    response (a C reader of it took ~0.2; no real run showed the difference: docs/bench.md)."""
    if len(head) < 12 or head[:9] not in (b"HTTP/1.1 ", b"HTTP/1.0 ") \
            or not head[9:12].isdigit():
        return None
    if head[12:13] != b" " and head[12:14] != b"\r\n":
        return None
    eol = head.find(b"\r\n", 12)
    if eol < 0:
        return None
    headers = head[eol + 2:].lower()
    if b"connection" in headers or b"content-length" in headers:
        return None
    if b"\r\ntransfer-encoding: chunked\r\n" not in b"\r\n" + headers + b"\r\n":
        return None
    return int(head[9:12])


class _Exchange:
    """One request/response on a connection: keeps raw body reads with their arrival times.

    The receive path only splits off the HTTP head and watches for the end of the body (the
    ``0\\r\\n\\r\\n`` last chunk, or Content-Length bytes); de-chunking and SSE reading happen
    later, in ``finalize``, so a busy moment on one connection does not delay the timestamps of
    the others.
    """

    __slots__ = ("future", "head", "status", "headers_ns", "mode", "reads", "skip", "remaining",
                 "end_ns", "error_kind", "error", "keep_alive", "received", "left",
                 "max_bytes")

    def __init__(self, future: asyncio.Future[None], max_bytes: int = _NO_LIMIT) -> None:
        self.future = future
        self.head = b""
        self.status = 0
        self.headers_ns: int | None = None
        self.mode = ""  # "" until the head is read, then chunked | length | close
        self.reads: list[tuple[int, bytes]] = []  # (arrival ns, raw body bytes)
        # the first read's bytes before the body (the HTTP head, when one read brought both):
        # kept, not sliced off, as slicing copied the whole body (~1 us of a fast server's
        # 34 KB response); body_reads() gives the body alone
        self.skip = 0
        self.remaining = 0
        self.end_ns: int | None = None
        self.error_kind: str | None = None
        self.error: str | None = None
        self.keep_alive = True
        self.received = False
        self.max_bytes = self.left = max_bytes  # body bytes allowed, still allowed

    def feed(self, ns: int, data: bytes) -> None:
        if self.future.done():
            return  # failed (or ended) already: the connection is dropped, the rest ignored
        skip = 0
        if not self.mode:
            self.received = True
            head = self.head + data if self.head else data
            cut = head.find(b"\r\n\r\n")
            if cut < 0:
                self.head = head
                if len(head) > _MAX_HEAD:
                    self.fail(ErrorKind.MALFORMED, f"HTTP response head over {_MAX_HEAD >> 10} "
                              "KiB without an end")
                return
            self.headers_ns = ns
            self._read_head(head[:cut])
            self.head = b""
            if self.future.done():
                return
            # _read_head set self.mode: mypy keeps the `not self.mode` narrowing across the call
            if self.mode == "length" and self.remaining <= 0:  # type: ignore[comparison-overlap]
                self.finish(ns)
                return
            if cut + 4 == len(head):
                return  # the head alone
            if head is data:
                skip = self.skip = cut + 4
            else:  # a head over several reads (rare): its last read's body part, copied
                data = head[cut + 4:]
        size = len(data) - skip
        self.left -= size
        if self.left < 0:
            self.fail(ErrorKind.MALFORMED, "response larger than the limit "
                      "(max_response_bytes): cut there")
            return
        self.reads.append((ns, data))
        if self.mode == "chunked":
            if data.endswith(_LAST_CHUNK) and size >= len(_LAST_CHUNK) or (
                    size < len(_LAST_CHUNK) and self._tail().endswith(_LAST_CHUNK)):
                self.finish(ns)
        elif self.mode == "length":
            self.remaining -= size
            if self.remaining <= 0:
                self.finish(ns)

    def _tail(self) -> bytes:
        """The body's last 5 bytes (or fewer), over the reads that hold them."""
        pieces: list[bytes | memoryview] = [d for _, d in self.reads[-5:]]
        if self.skip and len(self.reads) <= 5:
            pieces[0] = memoryview(pieces[0])[self.skip:]
        return b"".join(pieces)[-5:]

    def body_reads(self) -> list[tuple[int, bytes]]:
        """The reads with the body's bytes alone (the first read's head cut off: a copy)."""
        if not self.skip:
            return self.reads
        ns, first = self.reads[0]
        return [(ns, first[self.skip:]), *self.reads[1:]]

    def _read_head(self, head: bytes) -> None:
        if (status := usual_head(head)) is not None:
            # a streaming server's usual head, read at once as the rest of this method reads
            # it (a test holds the two equal)
            self.status, self.mode = status, "chunked"
            return
        # names and values compared lowercased, the head at once (~0.8 of ~1.7 us a response
        # went to lowering and stripping each header, read or not)
        low = head.lower()
        status_line, _, headers = low.partition(b"\r\n")
        parts = status_line.split(b" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            status_line = head.split(b"\r\n", 1)[0]
            self.fail(ErrorKind.MALFORMED, f"bad HTTP status line {status_line[:80]!r}")
            return
        self.mode = "close"
        for line in headers.split(b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.strip()
            if name not in _HEADERS_READ:
                continue
            value = value.strip()
            if name == b"transfer-encoding" and b"chunked" in value:
                self.mode = "chunked"
            elif name == b"content-length" and self.mode != "chunked":
                if not value.isdigit():
                    self.mode = ""
                    self.fail(ErrorKind.MALFORMED, "bad Content-Length header "
                              f"{value[:40].decode('latin-1')!r}")
                    return
                self.mode, self.remaining = "length", int(value)
            elif name == b"connection" and value == b"close":
                self.keep_alive = False
        if self.mode == "close":
            self.keep_alive = False

    def finish(self, ns: int) -> None:
        if not self.future.done():
            self.end_ns = ns
            self.future.set_result(None)

    def fail(self, kind: ErrorKind, message: str) -> None:
        if not self.future.done():
            self.error_kind, self.error = kind.value, message
            self.keep_alive = False
            self.future.set_result(None)

    @property
    def size(self) -> int:
        """Body bytes received (what this exchange holds in memory)."""
        return self.max_bytes - self.left

    def body_pieces(self) -> list[tuple[int, bytes]]:
        """(arrival ns, payload) per piece of the body, de-chunked; the ns is that of the read
        which completed the piece."""
        if self.mode != "chunked":
            return self.body_reads()
        return dechunk(self.body_reads())


class _Connection(asyncio.Protocol):
    __slots__ = ("transport", "exchange", "closed", "used")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.used = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is not None:
            exchange.feed(_perf_ns(), data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self.exchange
        if exchange is not None and not exchange.future.done():
            if exchange.mode == "close":
                exchange.finish(_perf_ns())
            else:
                reason = f": {exc}" if exc else ""
                exchange.fail(ErrorKind.CONNECTION, f"connection closed mid-response{reason}")


def check_headers(headers: dict[str, str]) -> None:
    """Refuses a header that would split the request (CR, LF or NUL; a colon in a name)."""
    for name, value in headers.items():
        if any(c in f"{name}{value}" for c in "\r\n\0") or ":" in name:
            # the value is not shown: it may be a secret (an API key)
            raise ConfigError(f"header {name[:40]!r}: a CR, LF or NUL in a header would "
                              "split the request")


class StreamingClient:
    """Sends prepared OpenAI-style requests and fills in ``RequestRecord``s."""

    def __init__(self, base_url: str, path: str, headers: dict[str, str],
                 timeout_s: float, max_response_bytes: int = _NO_LIMIT, *,
                 trace: bool = False) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1") and path.startswith("/v1/"):
            prefix = prefix[:-3]
        target = f"{prefix}{path}"
        if any(c in target for c in " \r\n\0"):
            raise ConfigError(f"URL path {target[:80]!r} has a space, CR, LF or NUL")
        check_headers(headers)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        # joined, never %-formatted: a % in the path or a header value is sent as it is
        self._head = (f"POST {target} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                      f"content-type: application/json\r\naccept: text/event-stream\r\n"
                      f"{extra}x-request-id: ").encode("utf-8")
        self.timeout_ns = int(timeout_s * 1e9)
        # one watchdog for every request in flight, not a timer each (a timer armed and
        # cancelled per request cost ~1.2 us of ~60): a timeout is noticed at most a tick late
        self._tick_s = max(min(_WATCHDOG_TICK_S, timeout_s / 20), 0.001)
        self._deadlines: dict[_Exchange, int] = {}
        self._watchdog: asyncio.TimerHandle | None = None
        self.max_response_bytes = max_response_bytes
        self._trace = trace
        self._idle: list[_Connection] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # the run's, taken at its first send

    def request_bytes(self, request_id: str, body: bytes, trace_id: str | None = None) -> bytes:
        # traceparent: version 00, the record's trace id, a parent id (its first 16 hex digits:
        # random, so unique enough) and flags 01 = sampled: without "sampled" vLLM's
        # parent-based sampler drops the span.
        trace = (b"\r\ntraceparent: 00-%s-%s-01" % (trace_id.encode(), trace_id[:16].encode())
                 if self._trace and trace_id else b"")
        return b"".join((self._head, request_id.encode(), trace, b"\r\ncontent-length: ",
                         str(len(body)).encode(), b"\r\n\r\n", body))

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self.host, self.port)
        return conn

    async def preconnect(self, count: int, parallel: int = 64) -> int:
        """Opens ``count`` keep-alive connections before a run, ``parallel`` at a time, so that
        its first wave is not a storm of TCP connects (the server's accept queue, SYN retries)
        on top of a burst of requests. Returns how many opened; a failure is left for the
        requests themselves to report."""
        gate = asyncio.Semaphore(parallel)

        async def one() -> _Connection | None:
            async with gate:
                try:
                    return await self._connect()
                except OSError:
                    return None

        opened = [c for c in await asyncio.gather(*(one() for _ in range(count))) if c]
        self._idle.extend(opened)
        return len(opened)

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    async def execute(self, body: bytes, record: RequestRecord) -> _Exchange:
        """Send one request and wait for its end; never raises for a failed request. The record
        gets ``sent_ns``; ``finalize(record, exchange, stream)`` fills in the rest later."""
        request = self.request_bytes(record.request_id, body, record.trace_id)
        for attempt in (0, 1):
            conn = self._take_idle() if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                try:
                    conn = await self._connect()
                except OSError as exc:
                    exchange = _Exchange(asyncio.get_running_loop().create_future())
                    exchange.fail(ErrorKind.CONNECTION, f"connect failed: {exc}")
                    record.sent_ns = _perf_ns()
                    return exchange
            exchange = self._send(conn, request, record)
            try:  # awaited here, not in a coroutine of its own: ~0.4 us a request less
                await exchange.future
            except asyncio.CancelledError:  # the run stopped: drop the half-done exchange
                conn.exchange = None
                if conn.transport is not None:
                    conn.transport.abort()
                raise
            finally:
                del self._deadlines[exchange]
            if reused and exchange.error_kind == "connection" and not exchange.received:
                continue  # the server closed an idle keep-alive connection: retry fresh
            break
        assert conn is not None  # both attempts end with a connection (or returned above)
        conn.exchange = None
        if exchange.keep_alive and exchange.error_kind is None and not conn.closed:
            self._idle.append(conn)
        elif conn.transport is not None:
            conn.transport.abort()
        return exchange

    def _send(self, conn: _Connection, request: bytes, record: RequestRecord) -> _Exchange:
        """The request on its way; its exchange ends when ``exchange.future`` is done (the
        caller awaits it, then forgets its deadline)."""
        loop = self._loop or self._bind_loop()
        exchange = _Exchange(loop.create_future(), self.max_response_bytes)
        conn.exchange = exchange
        record.sent_ns = _perf_ns()
        assert conn.transport is not None
        conn.transport.write(request)
        # the timeout counts from the scheduled time: an open loop's late send has less left
        self._deadlines[exchange] = record.scheduled_ns + self.timeout_ns
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._tick_s, self._watch)
        return exchange

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = asyncio.get_running_loop()
        return self._loop

    def _watch(self) -> None:
        """Fails the requests past their deadline; runs every tick while any is in flight."""
        now = _perf_ns()
        late = [exchange for exchange, deadline in self._deadlines.items() if now >= deadline]
        for exchange in late:
            exchange.fail(ErrorKind.TIMEOUT,
                          f"no complete response within {self.timeout_ns / 1e9:g} s")
        self._watchdog = (self._loop.call_later(self._tick_s, self._watch)
                          if self._deadlines and self._loop is not None else None)

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()
