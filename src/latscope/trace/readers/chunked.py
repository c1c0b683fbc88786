"""Fast streamed reading of a Chrome-trace ``traceEvents`` array: the text is read in blocks,
cut between two events, and each run of whole events is decoded by orjson (C) in one call.

Cuts are made at ``}`` ``,`` ``{`` (whitespace allowed) between events. A cut can only land
inside a string if a name contains that sequence; then the left part has an unterminated string,
orjson rejects it, and the block is simply merged with the next one, so correctness never
depends on the cut heuristic. Memory stays at a few blocks, never the whole text. The rest of
the document after the array (Kineto writes ``traceName``, sometimes ``deviceProperties``,
there) is parsed at the end.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from latscope.errors import TraceFormatError
from latscope.trace.readers.stream import open_binary

BLOCK = 8 << 20
_HEAD_LIMIT = 64 << 20
# The most text kept without a cut between two events: memory is bounded by this (and what the
# events decode to), never by the input. A gzip'd trace of 400 MB of whitespace inside its array
# once took 1.3 GB to refuse; no profiler writes an event this large.
MAX_UNCUT = 64 << 20
_CUT = re.compile(rb"\}\s*,\s*\{")


class ChunkedEvents:
    """Iterate decoded event lists; ``head``/``tail`` hold the document's other top-level keys."""

    def __init__(self, path: Path, expected: str, decode=orjson.loads) -> None:
        self.path, self.expected, self.decode = path, expected, decode
        self.head: dict[str, Any] = {}
        self.tail: dict[str, Any] = {}
        self.consumed = 0

    def _error(self, message: str, offset: int | None) -> TraceFormatError:
        return TraceFormatError(message, path=str(self.path), offset=offset,
                                expected=self.expected)

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        try:
            stream = open_binary(self.path)
        except OSError as exc:
            raise self._error(str(exc), None) from None
        with stream:
            try:
                yield from self._blocks(stream)
            except (OSError, EOFError) as exc:
                raise self._error(f"compressed stream is damaged ({exc})", self.consumed) \
                    from None

    def _read(self, stream) -> bytes:
        block = stream.read(BLOCK)
        self.consumed += len(block)
        return block

    def _blocks(self, stream) -> Iterator[list[dict[str, Any]]]:
        buf, bare = self._find_array_start(stream)
        base = self.consumed - len(buf)  # file offset of buf[0]
        eof = False
        while not eof:
            block = self._read(stream)
            eof = not block
            buf += block
            if eof:
                break
            cut = _last_cut(buf)
            if cut is None:
                if len(buf) > MAX_UNCUT:
                    raise self._error(f"no boundary between two events in {MAX_UNCUT >> 20} "
                                      "MiB of JSON (one event this large, or padding): not a "
                                      "trace latscope reads", base)
                continue
            piece_end, next_start = cut
            try:
                events = self.decode(b"[" + buf[:piece_end] + b"]")
            except (orjson.JSONDecodeError, ValueError):
                if len(buf) > MAX_UNCUT:
                    raise self._error(f"no decodable run of events in {MAX_UNCUT >> 20} MiB of "
                                      "JSON", base) from None
                continue  # a cut inside a string: merge with the next block and retry
            yield events
            base += next_start
            buf = buf[next_start:]
        cut = _last_cut(buf)  # decode the bulk of the last block on the fast path too
        if cut is not None:
            try:
                events = self.decode(b"[" + buf[:cut[0]] + b"]")
            except (orjson.JSONDecodeError, ValueError):
                events = None
            if events is not None:
                yield events
                base += cut[1]
                buf = buf[cut[1]:]
        prefix = b"[" if bare else b'{"traceEvents": ['
        try:
            rest = orjson.loads(prefix + buf)
        except orjson.JSONDecodeError as exc:
            offset = base + max(0, exc.pos - len(prefix))
            kind = "truncated" if offset >= self.consumed - 2 else "malformed"
            raise self._error(f"JSON is {kind} ({exc.msg})", offset) from None
        if bare:
            yield rest
        else:
            yield rest.pop("traceEvents")
            self.tail = rest

    def _find_array_start(self, stream) -> tuple[bytes, bool]:
        buf = b""
        while len(buf) < _HEAD_LIMIT:
            block = self._read(stream)
            if not block:
                break
            buf += block
            stripped = buf.lstrip()
            if stripped[:1] == b"[":
                return stripped[1:], True
            key = buf.find(b'"traceEvents"')
            if key >= 0:
                bracket = buf.find(b"[", key)
                if bracket < 0:
                    continue
                self.head = _parse_head(buf[:key])
                return buf[bracket + 1:], False
        raise self._error('no "traceEvents" array found', min(self.consumed, _HEAD_LIMIT))


def _last_cut(buf: bytes) -> tuple[int, int] | None:
    """(end of the last whole event, start of the next) near the end of ``buf``, or None."""
    window_start = max(0, len(buf) - (1 << 20))
    last = None
    for last in _CUT.finditer(buf, window_start):
        pass
    if last is None:
        if window_start == 0:
            return None
        for last in _CUT.finditer(buf):
            pass
        if last is None:
            return None
    return last.start() + 1, last.end() - 1


def _parse_head(text: bytes) -> dict[str, Any]:
    text = text.rstrip().rstrip(b",")
    if text.strip() in (b"{", b""):
        return {}
    try:
        data = orjson.loads(text + b"}")
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}
