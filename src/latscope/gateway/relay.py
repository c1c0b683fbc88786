"""The raw relay: the upstream's answer passed on as the bytes it sent, framing included.

aiohttp's client de-chunks a streamed answer and its server re-chunks each piece (a size line,
the piece, a CRLF: three buffers, a join and a transport write per piece). Here the gateway
speaks HTTP/1.1 to the upstream itself over a small keep-alive pool, reads the head, and copies
the body's bytes to the client unchanged: a chunked body keeps its chunk lines (the client
response says ``Transfer-Encoding: chunked`` and aiohttp's writer is told not to add its own), a
sized body keeps its ``Content-Length``. Only a close-delimited body (no length, no chunks) is
chunked for the client, as HTTP/1.1 requires to keep the client's connection.

What the gateway still needs to know is kept: where the body ends (``ChunkedEnd`` walks the chunk
size lines without copying or parsing the data), so the handler returns when the request is done
and admission releases its slot; a client that leaves cancels the handler, which closes the
upstream connection (vLLM then aborts the request); an upstream that breaks mid-answer cuts the
client off rather than end the body cleanly; statuses and error bodies pass through as sent.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web

READ_SIZE = 1 << 16
MAX_HEAD = 1 << 20  # bytes of status line and headers accepted from the upstream
MAX_SIZE_LINE = 4096  # a chunk size line (with extensions) longer than this is refused
# uvicorn (vLLM's server) closes a keep-alive connection idle for 5 s; one idle longer than this
# is not reused, so a request is not written into a connection the upstream is closing
IDLE_REUSE_S = 2.0


class UpstreamBroke(Exception):
    """The upstream closed or sent bad framing; the message says which."""


class ChunkedEnd:
    """Finds the end of a chunked body as it streams by, without copying its data."""

    def __init__(self) -> None:
        self.skip = 0  # data (and its CRLF) of the current chunk still to come
        self.line = b""  # a size or trailer line split across reads
        self.trailers = False
        self.done = False

    def feed(self, data: bytes) -> int:
        """How many bytes of ``data`` belong to the body (all, unless its end is inside)."""
        pos, n = 0, len(data)
        while pos < n:
            if self.skip:
                step = min(self.skip, n - pos)
                self.skip -= step
                pos += step
                continue
            eol = data.find(b"\n", pos)
            if eol < 0:
                self.line += data[pos:]
                if len(self.line) > MAX_SIZE_LINE:
                    raise UpstreamBroke("a chunk size line too long")
                return n
            line, self.line, pos = self.line + data[pos:eol], b"", eol + 1
            if self.trailers:
                if not line.strip():
                    self.done = True
                    return pos
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise UpstreamBroke(f"a bad chunk size line {line[:40]!r}") from None
            if size == 0:
                self.trailers = True
            else:
                self.skip = size + 2
        return n


@dataclass
class Head:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    chunked: bool = False
    length: int | None = None  # None with chunked False: the body ends when the upstream closes
    keep_alive: bool = True


def parse_head(raw: bytes, method: str) -> Head:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise UpstreamBroke(f"a bad status line {lines[0][:60]!r}")
    head = Head(int(parts[1]), parts[2] if len(parts) > 2 else "", [],
                keep_alive=parts[0] != "HTTP/1.0")
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise UpstreamBroke(f"a bad header line {line[:60]!r}")
        name, value = name.strip(), value.strip()
        lower = name.lower()
        if lower == "transfer-encoding":
            head.chunked = "chunked" in value.lower()
        elif lower == "content-length":
            if not value.isdigit():
                raise UpstreamBroke(f"a bad Content-Length {value[:20]!r}")
            head.length = int(value)
        elif lower == "connection":
            head.keep_alive = "close" not in value.lower() and (
                head.keep_alive or "keep-alive" in value.lower())
        head.headers.append((name, value))
    if method == "HEAD" or head.status in (204, 304):
        head.chunked, head.length = False, 0
    elif head.chunked:
        head.length = None
    if head.length is None and not head.chunked:
        head.keep_alive = False
    return head


@dataclass
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)
    reused: bool = False

    def close(self) -> None:
        self.writer.transport.abort()  # no FIN handshake wait: the upstream sees it at once


class RawChunkedResponse(web.StreamResponse):
    """Says ``Transfer-Encoding: chunked`` but writes the bytes it is given as they are: they
    already carry the upstream's chunk framing. (aiohttp has no public switch for this; the
    relay's tests compare the bytes a client receives with the upstream's, so a change in
    aiohttp's writer shows there.)"""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        assert self._payload_writer is not None
        self._payload_writer.chunked = False  # type: ignore[attr-defined]  # StreamWriter


class RawRelay:
    """A keep-alive pool of HTTP/1.1 connections to one upstream, and the relay over them."""

    def __init__(self, base_url: str, connect_timeout_s: float, read_timeout_s: float,
                 skip_headers: frozenset[str]) -> None:
        url = urlsplit(base_url)
        self.host = url.hostname or "127.0.0.1"
        self.ssl = ssl.create_default_context() if url.scheme == "https" else None
        self.port = url.port or (443 if self.ssl else 80)
        self.host_header = url.netloc.rpartition("@")[2]  # never the URL's user:password
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.skip_headers = skip_headers
        self._idle: list[Conn] = []

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def _connect(self) -> Conn:
        while self._idle:
            conn = self._idle.pop()
            if (time.monotonic() - conn.idle_since < IDLE_REUSE_S
                    and not conn.reader.at_eof() and not conn.writer.is_closing()):
                conn.reused = True
                return conn
            conn.close()
        async with asyncio.timeout(self.connect_timeout_s):
            reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl,
                                                           limit=MAX_HEAD)
        return Conn(reader, writer)

    def _release(self, conn: Conn) -> None:
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    async def open(self, request: web.Request, data: bytes) -> tuple[Conn, Head]:
        """Sends the request and reads the answer's head. A reused connection that the upstream
        closed before answering a byte is retried once on a fresh one (the upstream closed it
        idle, so it never saw the request). Connection errors are OSError or TimeoutError."""
        lines = [f"{request.method} {request.rel_url.raw_path_qs} HTTP/1.1",
                 f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in request.headers.items()
                  if k.lower() not in self.skip_headers]
        lines.append(f"Content-Length: {len(data)}\r\n\r\n")
        message = "\r\n".join(lines).encode("latin-1") + data
        for attempt in (0, 1):
            conn = await self._connect()
            try:
                conn.writer.write(message)
                async with asyncio.timeout(self.read_timeout_s):
                    raw = await conn.reader.readuntil(b"\r\n\r\n")
                    head = parse_head(raw[:-4], request.method)
                    while 100 <= head.status < 200:  # 100 Continue and the like: not ours
                        raw = await conn.reader.readuntil(b"\r\n\r\n")
                        head = parse_head(raw[:-4], request.method)
                return conn, head
            except asyncio.IncompleteReadError as exc:
                conn.close()
                if conn.reused and not exc.partial and attempt == 0:
                    continue
                raise ConnectionResetError("the upstream closed before answering") from None
            except asyncio.LimitOverrunError:
                conn.close()
                raise UpstreamBroke("a response head over 1 MiB") from None
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")

    async def relay(self, request: web.Request, conn: Conn, head: Head,
                    on_first_piece: Callable[[], None]) -> tuple[web.StreamResponse, str]:
        """Copies the body to the client; with the response, how it ended: ``whole`` (the
        connection goes back to the pool), ``client_left`` or ``upstream_broke: <why>`` (the
        head is sent by then, so the client is cut off rather than given a clean end that would
        pass a truncated answer as whole). Any other exception (the handler cancelled) leaves
        ``conn`` to the caller to close."""
        response = self._response(request, head)
        await response.prepare(request)
        try:
            await self._copy(conn.reader, response, head, on_first_piece)
        except (UpstreamBroke, TimeoutError) as exc:
            conn.close()
            if request.transport is not None:
                request.transport.close()
            return response, f"upstream_broke: {exc or 'timed out'}"
        except ConnectionResetError:  # the client left (aiohttp's ClientConnectionResetError)
            conn.close()
            return response, "client_left"
        if head.keep_alive:
            self._release(conn)
        else:
            conn.close()
        return response, "whole"

    async def _copy(self, reader: asyncio.StreamReader, response: web.StreamResponse,
                    head: Head, on_first_piece: Callable[[], None]) -> None:
        scanner = ChunkedEnd() if head.chunked else None
        left = head.length  # None: chunked (the scanner finds the end) or close-delimited
        first, loop = True, asyncio.get_running_loop()
        async with asyncio.timeout(None) as timeout:
            while left != 0 and not (scanner and scanner.done):
                timeout.reschedule(loop.time() + self.read_timeout_s)  # per read, as sock_read
                try:
                    piece = await reader.read(READ_SIZE)
                except OSError as exc:  # a reset from the upstream, not the client leaving
                    raise UpstreamBroke(f"the upstream's connection failed: {exc}") from None
                if not piece:
                    if left is None and scanner is None:
                        break  # close-delimited: this is its end
                    raise UpstreamBroke("the upstream closed mid-response")
                if first:
                    on_first_piece()
                    first = False
                keep = scanner.feed(piece) if scanner else min(len(piece), left or len(piece))
                if left is not None:
                    left -= keep
                if keep < len(piece):  # bytes past the body's end: the connection is unsafe
                    head.keep_alive = False
                    piece = piece[:keep]
                if left == 0 or (scanner and scanner.done):
                    await response.write_eof(piece)  # the last piece and the end in one send
                    return
                await response.write(piece)
        await response.write_eof()

    def _response(self, request: web.Request, head: Head) -> web.StreamResponse:
        headers = [(k, v) for k, v in head.headers if k.lower() not in self.skip_headers]
        if head.chunked and request.version >= (1, 1):
            response: web.StreamResponse = RawChunkedResponse(status=head.status,
                                                              reason=head.reason)
            response.enable_chunked_encoding()
        else:  # sized, or close-delimited (aiohttp frames it for the client as HTTP/1.1 needs)
            response = web.StreamResponse(status=head.status, reason=head.reason)
            if head.length is not None:
                response.content_length = head.length
        for key, value in headers:
            response.headers.add(key, value)
        return response
