"""A lean streaming HTTP/1.1 client built on ``asyncio.Protocol``, made for timing truth.

Why not aiohttp: measured on the 2-core dev box (see ``docs/bench.md``), a client that does the
least possible work when bytes arrive keeps its TTFT error near 0.1 ms where aiohttp-based peers
add tens of milliseconds, and streams several times more tokens/s. On every ``data_received`` the
connection takes one ``perf_counter_ns()``, keeps the bytes and checks for the end of the body;
nothing else. De-chunking, SSE framing and the few fields we need (is there content? usage
counts? [DONE]?) are read after the response ended (``finalize``), with byte searches and
regexes, never a full JSON decode per chunk.

Connections are kept alive and reused (one per in-flight request); a reused connection that the
server closed while idle is retried once on a fresh one, as HTTP clients do, and never counted as
a failure. A response is judged: HTTP >= 400, a connection lost mid-response, a timeout, bad SSE
framing, non-JSON data, a stream without ``[DONE]`` or an error event all set ``error_kind``.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import re
import time
from typing import Any
from urllib.parse import urlsplit

import orjson

from latscope.model import ErrorKind, RequestRecord

_perf_ns = time.perf_counter_ns
_CONTENT = re.compile(rb'"(?:text|content|reasoning_content|reasoning)"\s*:\s*"(?!")')
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_INT = re.compile(rb'\s*:\s*(\d+)')
_LAST_CHUNK = b"0\r\n\r\n"
_ERROR_TEXT_MAX = 300


class _Exchange:
    """One request/response on a connection: keeps raw body reads with their arrival times.

    The receive path only splits off the HTTP head and watches for the end of the body (the
    ``0\\r\\n\\r\\n`` last chunk, or Content-Length bytes); de-chunking and SSE reading happen
    later, in ``finalize``, so a busy moment on one connection does not delay the timestamps of
    the others.
    """

    __slots__ = ("future", "head", "status", "headers_ns", "mode", "reads", "remaining",
                 "end_ns", "error_kind", "error", "keep_alive", "received")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.head = b""
        self.status = 0
        self.headers_ns: int | None = None
        self.mode = ""  # "" until the head is read, then chunked | length | close
        self.reads: list[tuple[int, bytes]] = []  # (arrival ns, raw body bytes)
        self.remaining = 0
        self.end_ns: int | None = None
        self.error_kind: str | None = None
        self.error: str | None = None
        self.keep_alive = True
        self.received = False

    def feed(self, ns: int, data: bytes) -> None:
        if not self.mode:
            self.received = True
            self.head += data
            cut = self.head.find(b"\r\n\r\n")
            if cut < 0:
                return
            self.headers_ns = ns
            data = self.head[cut + 4:]
            self._read_head(self.head[:cut])
            self.head = b""
            if self.mode == "length" and self.remaining <= 0:
                self.finish(ns)
                return
            if not data:
                return
        self.reads.append((ns, data))
        if self.mode == "chunked":
            if data.endswith(_LAST_CHUNK) or (len(data) < 5 and self._tail().endswith(_LAST_CHUNK)):
                self.finish(ns)
        elif self.mode == "length":
            self.remaining -= len(data)
            if self.remaining <= 0:
                self.finish(ns)

    def _tail(self) -> bytes:
        return b"".join(d for _, d in self.reads[-5:])[-5:]

    def _read_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self.fail(ErrorKind.MALFORMED, f"bad HTTP status line {lines[0][:80]!r}")
            return
        self.mode = "close"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                self.mode = "chunked"
            elif name == b"content-length" and self.mode != "chunked":
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

    def body_pieces(self) -> list[tuple[int, bytes]]:
        """(arrival ns, payload) per piece of the body, de-chunked; the ns is that of the read
        which completed the piece."""
        if self.mode != "chunked":
            return self.reads
        return _dechunk(self.reads)


def _dechunk(reads: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    raw = b"".join([d for _, d in reads])
    total = len(raw)
    ends = list(itertools.accumulate([len(d) for _, d in reads]))
    out: list[tuple[int, bytes]] = []
    append, find = out.append, raw.find
    pos, k, last = 0, 0, len(reads) - 1
    while pos < total:
        eol = find(b"\r\n", pos)
        if eol < 0:
            raise _FramingError("truncated HTTP chunk size line")
        try:
            size = int(raw[pos:eol], 16)
        except ValueError:
            size = _chunk_size_with_extension(raw[pos:eol])
        if size == 0:
            break
        start = eol + 2
        pos = start + size + 2
        if pos > total:
            raise _FramingError("HTTP chunk cut short")
        while k < last and ends[k] < pos - 2:
            k += 1
        append((reads[k][0], raw[start:pos - 2]))
    return out


def _chunk_size_with_extension(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0], 16)
    except ValueError:
        raise _FramingError(f"bad HTTP chunk size line {line[:40]!r}") from None


class _FramingError(ValueError):
    pass


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


class StreamingClient:
    """Sends prepared OpenAI-style requests and fills in ``RequestRecord``s."""

    def __init__(self, base_url: str, path: str, headers: dict[str, str],
                 timeout_s: float) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1") and path.startswith("/v1/"):
            prefix = prefix[:-3]
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head = (f"POST {prefix}{path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
                      f"content-type: application/json\r\naccept: text/event-stream\r\n"
                      f"{extra}x-request-id: %s\r\ncontent-length: %d\r\n\r\n").encode()
        self.timeout_ns = int(timeout_s * 1e9)
        self._idle: list[_Connection] = []

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self.host, self.port)
        return conn

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    async def execute(self, body: bytes, record: RequestRecord) -> _Exchange:
        """Send one request and wait for its end; never raises for a failed request. The record
        gets ``sent_ns``; ``finalize(record, exchange, stream)`` fills in the rest later."""
        request = self._head % (record.request_id.encode(), len(body)) + body
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
            exchange = await self._exchange(conn, request, record)
            if reused and exchange.error_kind == "connection" and not exchange.received:
                continue  # the server closed an idle keep-alive connection: retry fresh
            break
        conn.exchange = None
        if exchange.keep_alive and exchange.error_kind is None and not conn.closed:
            self._idle.append(conn)
        elif conn.transport is not None:
            conn.transport.abort()
        return exchange

    async def _exchange(self, conn: _Connection, request: bytes,
                        record: RequestRecord) -> _Exchange:
        loop = asyncio.get_running_loop()
        exchange = _Exchange(loop.create_future())
        conn.exchange = exchange
        record.sent_ns = _perf_ns()
        assert conn.transport is not None
        conn.transport.write(request)
        left_s = (record.scheduled_ns + self.timeout_ns - record.sent_ns) / 1e9
        timer = loop.call_later(max(left_s, 0.0), exchange.fail, ErrorKind.TIMEOUT,
                                f"no complete response within {self.timeout_ns / 1e9:g} s")
        try:
            await exchange.future
        finally:
            timer.cancel()
        return exchange

    def close(self) -> None:
        for conn in self._idle:
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()


def _set_error(record: RequestRecord, kind: ErrorKind | str, message: str) -> None:
    record.error_kind = kind.value if isinstance(kind, ErrorKind) else kind
    record.error = message


def finalize(record: RequestRecord, exchange: _Exchange, stream: bool) -> None:
    """Fill a record from a finished exchange: status, timestamps, tokens, or the failure."""
    record.status = exchange.status or None
    record.headers_ns = exchange.headers_ns
    try:
        pieces = exchange.body_pieces()
    except _FramingError as exc:
        _set_error(record, exchange.error_kind or ErrorKind.MALFORMED, str(exc))
        return
    if exchange.error_kind:
        _set_error(record, exchange.error_kind, exchange.error or "")
        if stream and exchange.status < 400:
            _read_stream(record, pieces)  # keep the chunks that arrived before the failure
        return
    record.end_ns = exchange.end_ns
    if exchange.status >= 400:
        kind = ErrorKind.HTTP_5XX if exchange.status >= 500 else ErrorKind.HTTP_4XX
        text = b"".join(p for _, p in pieces)[:_ERROR_TEXT_MAX]
        _set_error(record, kind, f"HTTP {exchange.status}: {text.decode('utf-8', 'replace')}")
        return
    if stream:
        problem = _read_stream(record, pieces)
    else:
        problem = _read_whole(record, b"".join(p for _, p in pieces))
    if problem:
        _set_error(record, ErrorKind.MALFORMED, problem)


def _sse_events(pieces: list[tuple[int, bytes]]) -> tuple[list[bytes], list[int], bytes]:
    """Split SSE events; each gets the arrival ns of the piece that completed it. Returns
    (events, their ns, leftover bytes of an unterminated event)."""
    joined = b"".join([p for _, p in pieces])
    if b"\r" in joined:  # CRLF line ends (allowed by the SSE spec): normalise piece by piece
        pieces = [(ns, p.replace(b"\r\n", b"\n")) for ns, p in pieces]
        joined = b"".join([p for _, p in pieces])
    events = joined.split(b"\n\n")
    rest = events.pop()
    counts = [p.count(b"\n\n") for _, p in pieces]
    if counts.count(1) == len(counts):  # the usual case: one event per piece
        times = [ns for ns, _ in pieces]
    else:
        times = [ns for (ns, _), n in zip(pieces, counts) for _ in range(n)]
    if len(times) != len(events):  # a separator straddles two pieces: map by offset
        times = _times_by_offset(pieces, events)
    return events, times, rest


def _times_by_offset(pieces: list[tuple[int, bytes]], events: list[bytes]) -> list[int]:
    ends, total = [], 0
    for _, p in pieces:
        total += len(p)
        ends.append(total)
    times, offset = [], 0
    for event in events:
        offset += len(event) + 2
        times.append(pieces[bisect.bisect_left(ends, offset)][0])
    return times


def _read_stream(record: RequestRecord, pieces: list[tuple[int, bytes]]) -> str | None:
    """Reads SSE events; returns what was wrong with the stream, or None."""
    events, times, rest = _sse_events(pieces)
    done = False
    chunk_ns = record.chunk_ns
    content_events = []
    is_content = _CONTENT.search
    for event, ns in zip(events, times):
        # the usual event, one line "data: {...}", tested with two C-level calls
        if event.startswith(b"data: {") and event.endswith(b"}"):
            if is_content(event):
                chunk_ns.append(ns)
                content_events.append(event)
            elif b'"error"' in event:
                return "error event in stream: " + event[6:_ERROR_TEXT_MAX].decode(
                    "utf-8", "replace")
            continue
        payload = _data_of(event)
        if payload is None:
            continue  # comments (":"), event:, id:, retry: only
        if payload == b"[DONE]":
            done = True
        elif payload[:1] != b"{" or payload[-1:] != b"}":
            return f"SSE data is not a JSON object: {payload[:80]!r}"
        elif is_content(payload):
            chunk_ns.append(ns)
            content_events.append(payload)
        elif b'"error"' in payload:
            return "error event in stream: " + payload[:_ERROR_TEXT_MAX].decode("utf-8", "replace")
    if chunk_ns:
        record.first_token_ns = chunk_ns[0]
    if rest.strip():
        return f"stream ended inside an SSE event: {rest[:80]!r}"
    tail = b"".join(events[-3:])
    _set_tokens(record, _last_int(tail, b'"completion_tokens"'), _last_int(tail, b'"prompt_tokens"'),
                len(chunk_ns))
    if content_events and b'"completion_tokens"' in content_events[0]:
        _set_chunk_tokens(record, content_events)
    return None if done else "stream ended without data: [DONE]"


def _set_chunk_tokens(record: RequestRecord, content_events: list[bytes]) -> None:
    """Tokens per chunk from vLLM's continuous usage stats (cumulative completion_tokens)."""
    cumulative = []
    for event in content_events:
        m = _COMPLETION_TOKENS.search(event)
        if m is None:
            return
        cumulative.append(int(m[1]))
    record.chunk_tokens = [cumulative[0]] + [b - a for a, b in zip(cumulative, cumulative[1:])]


def _data_of(event: bytes) -> bytes | None:
    """The data of a multi-line SSE event (data lines joined by newlines, per the SSE spec)."""
    lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines).strip() if lines else None


def _last_int(text: bytes, key: bytes) -> int | None:
    at = text.rfind(key)
    if at < 0:
        return None
    m = _INT.match(text, at + len(key))
    return int(m[1]) if m else None


def _read_whole(record: RequestRecord, body: bytes) -> str | None:
    try:
        data: Any = orjson.loads(body)
        usage = data.get("usage") or {}
        record.server["id"] = data.get("id")
    except (orjson.JSONDecodeError, AttributeError):
        return f"response is not a JSON object: {body[:80]!r}"
    record.chunk_ns = [record.end_ns] if record.end_ns else []
    _set_tokens(record, usage.get("completion_tokens"), usage.get("prompt_tokens"), None)
    return None


def _set_tokens(record: RequestRecord, completion: int | None, prompt: int | None,
                counted: int | None) -> None:
    if completion is not None:
        record.output_tokens, record.output_tokens_source = int(completion), "usage"
    elif counted is not None:
        record.output_tokens, record.output_tokens_source = counted, "counted"
    if prompt is not None:
        record.prompt_tokens = int(prompt)
