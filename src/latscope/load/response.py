"""Reading a finished HTTP response into a ``RequestRecord``: de-chunking, SSE events, tokens.

Runs after a response ended, never on the receive path. Every piece of the body keeps the arrival
time of the read that completed it, and every SSE event the time of the piece that completed it.
An event is a token chunk when it carries a ``text``, ``delta.content`` or ``reasoning(_content)``
string, empty or not, and is not a chat role announcement (``delta.role``); found with regexes,
so no chunk's JSON is decoded: this is what lets one Python process parse several hundred
thousand streamed tokens per second. Empty strings count because vLLM streams an event with
empty text for every token that does not yet decode to whole characters (a multi-byte character
split over several byte-level BPE tokens, common in CJK text): skipping them would move TTFT
later and stretch ITL. Output tokens come
from the server's ``usage`` when it sends one (``stream_options.include_usage``), else they are
the number of token chunks.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re
from typing import Any, Protocol

import numpy as np
import orjson

from latscope.model import ErrorKind, RequestRecord

try:  # the C pass over a finished stream (setup.py builds it where a compiler is found)
    from latscope import _native
except ImportError:  # pragma: no cover - exercised where no compiler is found
    _native = None  # type: ignore[assignment]

_CONTENT = re.compile(rb'"(?:text|content|reasoning_content|reasoning)"\s*:\s*"')
_ROLE = re.compile(rb'"role"\s*:')
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_INT = re.compile(rb'\s*:\s*(\d+)')
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
            and read_stream_quick(record, exchange.reads)):
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


def _read_stream_c(record: RequestRecord, reads: list[tuple[int, bytes]]) -> bool:
    """The usual stream, read by one C-level pass (``latscope/_native.c``): framing, events,
    token events and their times, exactly as the exact reader (``_read_stream`` over
    ``dechunk``) reads them; False where the stream is not the common shape, and the exact
    reader runs instead."""
    scanned = _native.scan_stream(reads) if _native is not None else None
    if scanned is None:
        return False
    chunk_ns, tail = scanned
    _keep_server_metrics(record, tail)
    record.chunk_ns = chunk_ns
    record.first_token_ns = chunk_ns[0] if chunk_ns else None
    _set_tokens(record, _last_int(tail, b'"completion_tokens"'), _last_int(tail, b'"prompt_tokens"'),
                len(chunk_ns))
    return True


_FAST_MARKS = (b'"text":"', b'"content":"', b'"reasoning_content":"', b'"reasoning":"')
_FAST_KEYS = tuple(mark[:-2] for mark in _FAST_MARKS)  # the key alone, quoted
# What the fast path must not find after the first event, in one regex pass instead of one scan
# each (~55 us of ~200 on a 34 KB body); a reasoning key stops it early, then the scans run
_FAST_DECLINE = re.compile(rb'"(?:error"|role"|reasoning)')


def _fast_marks(raw: bytes, first: bytes, first_end: int) -> list[bytes] | None:
    """The token marks in ``raw``, or None when it holds an error key or a role key outside
    its first event (``first``)."""
    if b'"error"' in first or first.count(b'"role"') > 1:
        return None
    hit = _FAST_DECLINE.search(raw, first_end)
    reasoning = b'"reasoning' in first
    if hit is not None:
        if hit[0] != b'"reasoning':
            return None
        if b'"error"' in raw or raw.count(b'"role"') > first.count(b'"role"'):
            return None  # a reasoning model's stream: the scans the regex did not finish
        reasoning = True
    marks = []
    for key, mark in zip(_FAST_KEYS if reasoning else _FAST_KEYS[:2], _FAST_MARKS):
        keys = raw.count(key)
        if keys and raw.count(mark) != keys:
            return None  # a key spaced ("text": "), or a key name as a value: read exactly
        if keys:
            marks.append(mark)
    return marks


def _read_stream_fast(record: RequestRecord, reads: list[tuple[int, bytes]]) -> bool:
    """The usual stream, read with whole-buffer C-level counts instead of a Python loop per event.

    Applies only when the raw chunked body proves to be the common shape: compact JSON, one
    ``data: {...}`` line per event, events never split across HTTP chunks, no CR inside events,
    no per-chunk usage, no error event, ``[DONE]`` last. Any doubt returns False and the exact
    per-event reader runs instead (the two agree on every stream the tests feed them).

    Cost is what bounds one process's ceiling (``benchmarks/client_ceiling.py``), so the checks
    are few C-level passes: one split on CR LF gives the chunk framing; numpy counts of CR and
    LF prove that every CR is framing; C-level maps over the chunks and the LF count prove one
    event per chunk, each one line (``_events_one_per_chunk``; coalesced chunks by whole-body
    counts); then one regex pass for the keys that need the exact reader (error, a late role)
    and one count per token mark present.
    ``benchmarks/parse_cost.py`` measures it.
    """
    raw = b"".join([d for _, d in reads]) if len(reads) > 1 else reads[0][1] if reads else b""
    first_end = raw.find(b"\n\n")
    if (not raw.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
            or b'"usage"' in raw[:first_end]):  # per-chunk usage: read each event
        return False
    parts = raw.split(b"\r\n")
    cr, lf = _byte_counts(raw)
    if cr != len(parts) - 1:  # CRs only in chunk framing
        return False
    events = _events_one_per_chunk(parts, lf)
    if events is None:  # several events in a chunk (a proxy's coalescing?): prove it by counts
        events = _events_by_counts(raw, parts, lf)
    if events is None:  # damaged framing, or a shape not proved here: the exact reader says how
        return False
    marks = _fast_marks(raw, raw[:first_end], first_end)
    if marks is None:
        return False  # an error event, or a role announcement after the first event
    # token marks inside a chat role announcement: its first event, if any
    role_marks = _count_marks(raw[:first_end], marks) if b'"role"' in raw[:first_end] else 0
    if _first_token_event_counts(raw, marks, first_end if role_marks else 0):
        return False  # usage per token event (no "usage" key): the exact reader counts per chunk
    total_marks = _count_marks(raw, marks)
    if total_marks > events - 1:
        return False  # two marks in one event (e.g. content and reasoning): read exactly
    chunk_ns: list[int] | None
    if len(reads) == 1:
        chunk_ns = [reads[0][0]] * total_marks
    elif all(map(bytes.endswith, [d for _, d in reads], itertools.repeat(_READ_ENDS))):
        chunk_ns = _times_of_whole_event_reads(reads, marks)
    else:
        chunk_ns = _times_of_split_reads(reads, marks, events)
    if chunk_ns is None or len(chunk_ns) != total_marks:
        return False  # a mark or an event end split across two reads: count exactly instead
    del chunk_ns[:role_marks]
    tail = raw[_last_events_start(raw, 3):]  # where the exact reader looks for usage too
    _keep_server_metrics(record, tail)
    completion = _last_int(tail, b'"completion_tokens"')
    if not chunk_ns and events > 1:
        return False  # tokens but no compact "text":"..." marks (e.g. '"text": "'): read exactly
    record.chunk_ns = chunk_ns
    record.first_token_ns = chunk_ns[0] if chunk_ns else None
    _set_tokens(record, completion, _last_int(tail, b'"prompt_tokens"'), len(chunk_ns))
    return True


# Which reader takes a finished stream first (its name goes into summary.json's client section):
# the C pass where it was built, else the pure-Python one; either declines to the exact reader
STREAM_PARSER = "c" if _native is not None else "python"
read_stream_quick = _read_stream_c if _native is not None else _read_stream_fast


def _first_token_event_counts(raw: bytes, marks: list[bytes], start: int) -> bool:
    """Whether the first token event (the line of the first mark from ``start``) carries
    ``"completion_tokens"``: the exact reader then takes tokens per chunk from each event."""
    found = [at for at in (raw.find(m, start) for m in marks) if at >= 0]
    if not found or b'"completion_tokens"' not in raw:
        return False
    at = min(found)
    line_end = raw.find(b"\n", at)
    return b'"completion_tokens"' in raw[raw.rfind(b"\n", 0, at) + 1:line_end]


def _last_events_start(raw: bytes, count: int) -> int:
    """Where the body's last ``count`` events (proved one line each) start: the exact reader
    looks for usage and metrics in its last 3. Reverse scans, not a whole-body one (~8 us)."""
    end = len(raw) - len(b"\r\n0\r\n\r\n")  # past [DONE]'s LF pair
    for _ in range(count):
        end = raw.rfind(b"\n\n", 0, end - 1)
        if end < 0:
            return 0
    return end + 2


# A read that ends where an HTTP chunk (so an event: proved above) ends, or the body does
_READ_ENDS = (b"\n\n\r\n", b"\r\n0\r\n\r\n")


def _times_of_whole_event_reads(reads: list[tuple[int, bytes]], marks: list[bytes]) -> list[int]:
    """Each token's arrival when no read ends inside an event (the usual case: the server flushes
    one event per write): a read's marks are its own events' tokens, so C-level counts per read
    replace a Python loop per read (~1.5 us each, 400 us on a 256-read response)."""
    datas = [d for _, d in reads]
    counts = [0] * len(datas)
    for mark in marks:
        counts = list(map(operator.add, counts, map(bytes.count, datas, itertools.repeat(mark))))
    return list(itertools.chain.from_iterable(map(itertools.repeat, [ns for ns, _ in reads],
                                                  counts)))


def _times_of_split_reads(reads: list[tuple[int, bytes]], marks: list[bytes],
                          events: int) -> list[int] | None:
    """Each token's arrival when reads end anywhere (a slow reader, a proxy's buffering): a
    read's marks after its last event end belong to the read that ends that event."""
    chunk_ns: list[int] = []
    carried = seen_events = 0
    for ns, data in reads:
        ends_here = data.count(b"\n\n")
        seen_events += ends_here
        if not ends_here:
            carried += _count_marks(data, marks)
            continue
        after = data.rfind(b"\n\n") + 2  # marks after the last event end: a later read's
        chunk_ns.extend([ns] * (carried + _count_marks(data[:after], marks)))
        carried = _count_marks(data[after:], marks)
    return None if carried or seen_events != events else chunk_ns


# Size lines as servers write them (lowercase hex) -> value: a dict lookup instead of int(line,
# 16), 6 against 15 us for 257 chunks; any other line goes through int() as before
_HEX_SIZES = {b"%x" % n: n for n in range(1 << 12)}


def _chunk_size(line: bytes) -> int:
    size = _HEX_SIZES.get(line)
    return int(line, 16) if size is None else size


# events the last chunk may hold (last token, usage, [DONE] in one write) before counts prove it
_LAST_CHUNK_EVENTS = 8


def _events_one_per_chunk(parts: list[bytes], lf: int) -> int | None:
    """The body's SSE events ([DONE] included) when every chunk but the last is one
    ``data: {...}`` line and the last holds a few such lines, then ``data: [DONE]``; else None.

    ``parts`` is the body split on CR LF, which the caller proved occurs only in the framing
    (size, data, size, data, ..., "0", "", ""); ``lf`` the body's LF count. Each chunk's size is
    checked against its data; every chunk but the last starts ``data: {`` and ends ``}\\n\\n``
    (C-level maps), so holds at least two LFs; the LF count then proves it holds no other (no
    second event, no multi-line one) and that no size line holds one.
    """
    datas = _chunk_datas(parts) if len(parts) >= 5 else None
    if datas is None:
        return None
    head, n = datas[:-1], len(datas) - 1
    if (not all(map(bytes.startswith, head, itertools.repeat(b"data: {", n)))
            or not all(map(bytes.endswith, head, itertools.repeat(b"}\n\n", n)))):
        return None
    tail = datas[-1].split(b"\n\n")
    if len(tail) > _LAST_CHUNK_EVENTS + 1 or tail[-2:] != [b"data: [DONE]", b""]:
        return None
    for event in tail[:-2]:
        if not (event.startswith(b"data: {") and event.endswith(b"}")) or b"\n" in event:
            return None
    if lf != len(parts) - 1 + 2 * n + 2 * (len(tail) - 1):
        return None
    return n + len(tail) - 1


def _events_by_counts(raw: bytes, parts: list[bytes], lf: int) -> int | None:
    """The body's SSE events ([DONE] included) proved by whole-body counts, for chunks that
    hold several events: every LF framing or an event's ``}\\n\\n`` or [DONE]'s, as many
    ``data: {`` as ``}\\n\\n``, chunk sizes matching, every chunk ending an event."""
    ends = raw.count(b"}\n\n")  # the JSON events; with [DONE]: every event
    if (lf != 2 * (ends + 1) + len(parts) - 1 or raw.count(b"data: {") != ends
            or not _chunk_sizes_match(parts)):
        return None
    return ends + 1


def _chunk_datas(parts: list[bytes]) -> list[bytes] | None:
    """The chunks' data when every size line is hex and equals its data's length, else None.
    ``parts`` is the body split on CR LF, which the caller has proved occurs only in the
    framing: size, data, size, data, ..., "0", "", "" (C-level maps, no Python loop)."""
    if len(parts) % 2 == 0 or parts[-3:] != [b"0", b"", b""]:
        return None
    sizes, datas = parts[0:-3:2], parts[1:-3:2]
    try:
        return datas if list(map(_chunk_size, sizes)) == list(map(len, datas)) else None
    except ValueError:
        return None


def _chunk_sizes_match(parts: list[bytes]) -> bool:
    """The chunks' sizes match their data (``_chunk_datas``), and every chunk ends where an
    event ends."""
    datas = _chunk_datas(parts)
    return datas is not None and all(
        map(bytes.endswith, datas, itertools.repeat(b"\n\n", len(datas))))


def _byte_counts(raw: bytes) -> tuple[int, int]:
    """CRs and LFs in ``raw``, by numpy: 8 against bytes.count's 51 us on a 64 KB body."""
    octets = np.frombuffer(raw, dtype=np.uint8)
    return int(np.count_nonzero(octets == 13)), int(np.count_nonzero(octets == 10))


def _count_marks(data: bytes, marks: list[bytes]) -> int:
    """Token-carrying text/content values (empty ones included)."""
    return sum(data.count(m) for m in marks)


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
    _keep_server_metrics(record, b"\n\n".join(events[-3:]) + b"\n\n")
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


def _keep_server_metrics(record: RequestRecord, body: bytes) -> None:
    """vLLM's per-request timings (``--enable-per-request-metrics``) ride in the last usage event
    as ``"metrics": {...}``; decode that one event only, once per request, after it ended."""
    at = body.rfind(b'"metrics"')
    if at < 0:
        return
    start = body.rfind(b"data:", 0, at)
    end = body.find(b"\n\n", at)
    try:
        data = orjson.loads(body[start + 5:end if end >= 0 else len(body)].strip())
    except orjson.JSONDecodeError:
        return  # "metrics" was part of the generated text, not a field
    if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
        record.server["metrics"] = data["metrics"]


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
        if isinstance(data.get("metrics"), dict):  # vLLM --enable-per-request-metrics
            record.server["metrics"] = data["metrics"]
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
