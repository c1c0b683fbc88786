"""Reading a finished HTTP response into a ``RequestRecord``: de-chunking, SSE events, tokens.

Runs after a response ended, never on the receive path. Every piece of the body keeps the arrival
time of the read that completed it, and every SSE event the time of the piece that completed it.
An event is a token chunk when it carries a ``text``, ``delta.content`` or ``reasoning(_content)``
string, empty or not, and is not a chat role announcement (``delta.role``); found with regexes
(here) or byte scans (the quick readers), so no chunk's JSON is decoded. Empty strings count
because vLLM streams an event with empty text for every token that does not yet decode to whole
characters (a multi-byte character split over several byte-level BPE tokens, common in CJK
text): skipping them would move TTFT later and stretch ITL. Output tokens come from the server's
``usage`` when it sends one (``stream_options.include_usage``), else they are the number of
token chunks.

Three readers, one answer: a usual stream is read by a quick pass, the C one
(``latscope/_native.c``, ~15 us per 64 KB response) or where it was not built its pure-Python
twin (``latscope.fastread``, ~250-400 us; ``latscope.native`` picks); either declines anything
unusual to the exact per-event reader here, which is the reference both are held to
(tests/unit/fuzz, target ``sse_chunked``).
"""

from __future__ import annotations

import bisect
import itertools
import re
from typing import Any, Protocol

import orjson

from latscope import native
from latscope.load.streamtail import keep_server_metrics, last_int, set_tokens
from latscope.model import ErrorKind, RequestRecord

_CONTENT = re.compile(rb'"(?:text|content|reasoning_content|reasoning)"\s*:\s*"')
_ROLE = re.compile(rb'"role"\s*:')
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_ERROR_TEXT_MAX = 300


def dechunk(reads: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The body de-chunked: (arrival ns, bytes) per part of a chunk's data that one read brought,
    so an event inside a coalesced chunk gets the time of the read that completed it, as the
    fast reader gives it, not the chunk's end."""
    raw = b"".join([d for _, d in reads])
    total = len(raw)
    ends = list(itertools.accumulate([len(d) for _, d in reads]))
    out: list[tuple[int, bytes]] = []
    append, find = out.append, raw.find
    pos, k, last = 0, 0, len(reads) - 1
    while pos < total:
        eol = find(b"\r\n", pos)
        if eol < 0:
            raise FramingError("truncated HTTP chunk size line")
        try:
            size = int(raw[pos:eol], 16)
        except ValueError:
            size = _chunk_size_with_extension(raw[pos:eol])
        if size == 0:
            break
        start = eol + 2
        pos = start + size + 2
        if pos > total:
            raise FramingError("HTTP chunk cut short")
        while k < last and ends[k] <= start:  # the read holding the data's first byte
            k += 1
        while k < last and ends[k] < pos - 2:  # a read that ends inside the data: its part
            append((reads[k][0], raw[start:ends[k]]))
            start = ends[k]
            k += 1
        append((reads[k][0], raw[start:pos - 2]))
    return out


def _chunk_size_with_extension(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0], 16)
    except ValueError:
        raise FramingError(f"bad HTTP chunk size line {line[:40]!r}") from None


class FramingError(ValueError):
    pass


def _set_error(record: RequestRecord, kind: ErrorKind | str, message: str) -> None:
    record.error_kind = kind.value if isinstance(kind, ErrorKind) else kind
    record.error = message


class Exchange(Protocol):
    """What ``finalize`` reads of a finished exchange (``latscope.load.client._Exchange``),
    named here so that this module does not import the client that imports it."""

    status: int
    headers_ns: int | None
    end_ns: int | None
    error_kind: str | None
    error: str | None
    mode: str
    reads: list[tuple[int, bytes]]
    skip: int  # the first read's bytes before the body (its HTTP head)

    def body_reads(self) -> list[tuple[int, bytes]]: ...

    def body_pieces(self) -> list[tuple[int, bytes]]: ...


def finalize(record: RequestRecord, exchange: Exchange, stream: bool) -> None:
    """Fill a record from a finished exchange: status, timestamps, tokens, or the failure."""
    record.status = exchange.status or None
    record.headers_ns = exchange.headers_ns
    if exchange.error_kind:
        _set_error(record, exchange.error_kind, exchange.error or "")
        if stream and exchange.status and exchange.status < 400:
            try:  # keep the chunks that arrived before the failure
                _read_stream(record, exchange.body_pieces())
            except FramingError:
                pass  # a body cut mid-chunk: the failure above already says why
        return
    record.end_ns = exchange.end_ns
    if (stream and exchange.mode == "chunked" and exchange.status < 400
            and read_stream_quick(record, exchange.reads, exchange.skip)):
        return
    try:
        pieces = exchange.body_pieces()
    except FramingError as exc:
        record.end_ns = None
        _set_error(record, ErrorKind.MALFORMED, str(exc))
        return
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


def read_stream_quick(record: RequestRecord, reads: list[tuple[int, bytes]],
                      skip: int = 0, scan: native.Scan | None = None) -> bool:
    """The usual stream, read by one quick pass (``native.scan_stream``: the C pass, or its
    twin): framing, events, token events and their times, exactly as the exact reader
    (``_read_stream`` over ``dechunk``) reads them; False where the stream is not the common
    shape, and the exact reader runs instead. ``skip``: the first read's bytes before the body
    (its HTTP head); ``scan``: another backend's pass (the tests'; default ``scan_stream``)."""
    scanned = (scan or scan_stream)(reads, skip)
    if scanned is None:
        return False
    chunk_ns, tail = scanned
    keep_server_metrics(record, tail)
    record.chunk_ns = chunk_ns
    record.first_token_ns = chunk_ns[0] if chunk_ns else None
    set_tokens(record, last_int(tail, b'"completion_tokens"'), last_int(tail, b'"prompt_tokens"'),
                len(chunk_ns))
    return True


# Which quick pass reads a finished stream first (its name goes into summary.json's client
# section): the C pass where it was built, else its twin; either declines to the exact reader.
# A module global, looked up at each call: the tests set it to each backend's in turn.
STREAM_PARSER = native.BACKEND
scan_stream = native.scan_stream


def _sse_events(pieces: list[tuple[int, bytes]]) -> tuple[list[bytes], list[int], bytes]:
    """Split SSE events; each gets the arrival ns of the piece that completed it. Returns
    (events, their ns, leftover bytes of an unterminated event)."""
    joined = b"".join([p for _, p in pieces])
    if b"\r" in joined:  # CRLF line ends (allowed by the SSE spec): normalise piece by piece
        pieces = _without_crlf(pieces)
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


def _without_crlf(pieces: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """CR LF -> LF piece by piece; a CR that ends a piece moves to the next one, so a CR LF cut
    between two reads is still one line end (completed by the later read)."""
    out: list[tuple[int, bytes]] = []
    carry = b""
    for ns, piece in pieces:
        piece, carry = carry + piece, b""
        if piece.endswith(b"\r"):
            piece, carry = piece[:-1], b"\r"
        out.append((ns, piece.replace(b"\r\n", b"\n")))
    if carry:
        out[-1] = (out[-1][0], out[-1][1] + carry)
    return out


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
    is_content, is_role = _CONTENT.search, _ROLE.search
    for event, ns in zip(events, times):
        # the usual event, one line "data: {...}", tested with two C-level calls
        if event.startswith(b"data: {") and event.endswith(b"}"):
            if is_content(event) and not is_role(event):
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
        elif is_content(payload) and not is_role(payload):
            chunk_ns.append(ns)
            content_events.append(payload)
        elif b'"error"' in payload:
            return "error event in stream: " + payload[:_ERROR_TEXT_MAX].decode("utf-8", "replace")
    if chunk_ns:
        record.first_token_ns = chunk_ns[0]
    if rest.strip():
        return f"stream ended inside an SSE event: {rest[:80]!r}"
    tail = b"".join(events[-3:])
    keep_server_metrics(record, b"\n\n".join(events[-3:]) + b"\n\n")
    set_tokens(record, last_int(tail, b'"completion_tokens"'), last_int(tail, b'"prompt_tokens"'),
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


def _read_whole(record: RequestRecord, body: bytes) -> str | None:
    try:
        data: Any = orjson.loads(body)
        usage = data.get("usage") or {}
        record.server["id"] = data.get("id")
        if isinstance(data.get("metrics"), dict):  # vLLM --enable-per-request-metrics
            record.server["metrics"] = data["metrics"]
    except (orjson.JSONDecodeError, AttributeError):
        return f"response is not a JSON object: {body[:80]!r}"
    record.chunk_ns = [record.end_ns] if record.end_ns else []
    set_tokens(record, usage.get("completion_tokens"), usage.get("prompt_tokens"), None)
    return None


