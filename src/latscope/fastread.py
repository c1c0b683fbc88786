"""The pure-Python twin of the C stream pass (``_native.scan_stream``): whole-buffer C-level
``bytes`` counts instead of a Python loop per event. ``latscope.native`` takes it where the C pass
was not built; like the pass, it answers exactly what the exact reader
(``latscope.load.response._read_stream``) answers, or declines to it, and every reading test runs
with both.
"""

from __future__ import annotations

import itertools
import operator
import re

import numpy as np

_FAST_MARKS = (b'"text":"', b'"content":"', b'"reasoning_content":"', b'"reasoning":"')
_FAST_KEYS = tuple(mark[:-2] for mark in _FAST_MARKS)  # the key alone, quoted
# What the fast path must not find after the first event, in one regex pass instead of one scan
# each (~55 us of ~200 on a 34 KB body); a reasoning key stops it early, then the scans run
_FAST_DECLINE = re.compile(rb'"(?:error"|role"|reasoning)')


def _fast_marks(raw: bytes, first: bytes, first_end: int) -> tuple[list[bytes], int] | None:
    """The token marks in ``raw`` and how many there are, or None when it holds an error key,
    a role key outside its first event (``first``), or a token key not written as a mark."""
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
    marks, total = [], 0
    for key, mark in zip(_FAST_KEYS if reasoning else _FAST_KEYS[:2], _FAST_MARKS):
        keys = raw.count(key)
        if keys and raw.count(mark) != keys:
            return None  # a key spaced ("text": "), or a key name as a value: read exactly
        if keys:
            marks.append(mark)
            total += keys
    return marks, total


def scan_stream(reads: list[tuple[int, bytes]], skip: int = 0) -> tuple[list[int], bytes] | None:
    """The usual stream's token times and tail, read with whole-buffer C-level counts instead of
    a Python loop per event: what ``_native.scan_stream`` answers (the tail here is still
    chunked: the usage counts and the server's metrics are read from it alike).

    Applies only when the raw chunked body proves to be the common shape: compact JSON, one
    ``data: {...}`` line per event, events never split across HTTP chunks, no CR inside events,
    no per-chunk usage, no error event, ``[DONE]`` last. Any doubt returns None and the exact
    per-event reader runs instead (the two agree on every stream the tests feed them).

    Cost bounds one process's ceiling where the C pass is not built
    (``benchmarks/client_ceiling.py``), so the checks are few C-level passes: one split on CR LF
    gives the chunk framing; numpy counts of CR and LF prove that every CR is framing; C-level
    maps over the chunks and the LF count prove one event per chunk, each one line
    (``_events_one_per_chunk``; coalesced chunks by whole-body counts); then one regex pass for
    the keys that need the exact reader (error, a late role) and two counts per token key
    present, the key and its compact mark (a spaced key, which the marks would miss, declines).
    ``benchmarks/parse_cost.py`` measures it. ``skip``: the first read's bytes before the body
    (its HTTP head).
    """
    if skip:
        reads = [(reads[0][0], reads[0][1][skip:]), *reads[1:]]
    raw = b"".join([d for _, d in reads]) if len(reads) > 1 else reads[0][1] if reads else b""
    first_end = raw.find(b"\n\n")
    if (not raw.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
            or b'"usage"' in raw[:first_end]):  # per-chunk usage: read each event
        return None
    parts = raw.split(b"\r\n")
    cr, lf = _byte_counts(raw)
    if cr != len(parts) - 1:  # CRs only in chunk framing
        return None
    events = _events_one_per_chunk(parts, lf)
    if events is None:  # several events in a chunk (a proxy's coalescing?): prove it by counts
        events = _events_by_counts(raw, parts, lf)
    if events is None:  # damaged framing, or a shape not proved here: the exact reader says how
        return None
    found = _fast_marks(raw, raw[:first_end], first_end)
    if found is None:
        return None  # an error event, a late role announcement, a token key spaced
    marks, total_marks = found
    # token marks inside a chat role announcement: its first event, if any
    role_marks = _count_marks(raw[:first_end], marks) if b'"role"' in raw[:first_end] else 0
    if _first_token_event_counts(raw, marks, first_end if role_marks else 0):
        return None  # usage per token event (no "usage" key): the exact reader counts per chunk
    if total_marks > events - 1:
        return None  # two marks in one event (e.g. content and reasoning): read exactly
    chunk_ns: list[int] | None
    if len(reads) == 1:
        chunk_ns = [reads[0][0]] * total_marks
    elif all(map(bytes.endswith, [d for _, d in reads], itertools.repeat(_READ_ENDS))):
        chunk_ns = _times_of_whole_event_reads(reads, marks)
    else:
        chunk_ns = _times_of_split_reads(reads, marks, events)
    if chunk_ns is None or len(chunk_ns) != total_marks:
        return None  # a mark or an event end split across two reads: count exactly instead
    del chunk_ns[:role_marks]
    if not chunk_ns and events > 1:
        return None  # tokens but no compact "text":"..." marks (e.g. '"text": "'): read exactly
    return chunk_ns, raw[_last_events_start(raw, 3):]  # where the exact reader looks for usage


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
