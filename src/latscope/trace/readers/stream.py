"""Streaming helpers shared by the JSON readers: gzip-transparent opening, byte counting (for
error offsets) and a guard for integers wider than 64 bits, which ijson's C backend rejects
("integer overflow") and which rocprofv3 writes (e.g. ``hive_id``).
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson

from latscope.errors import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
# An object member whose value is an integer of 19+ digits: quote it. (Array elements are left
# alone: no known trace writes wide integers there, and the ':' anchor keeps the scan fast.)
_BIG_INT = re.compile(rb"(:\s*)(\d{19,})(?=\s*[,\]}])")


def open_binary(path: Path) -> BinaryIO:
    """Open a file, decompressing gzip on the fly (decided by the magic bytes, not the name)."""
    raw = open(path, "rb")
    magic = raw.read(2)
    raw.seek(0)
    if magic == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


class IntegerOverflow(Exception):
    """ijson's C backend met an integer wider than 64 bits; re-read with ``guard=True``."""


class GuardedReader(io.RawIOBase):
    """A read-only stream that counts bytes handed out and, if ``guard``, quotes wide integers."""

    def __init__(self, inner: BinaryIO, guard: bool = False) -> None:
        self.inner = inner
        self.guard = guard
        self.consumed = 0
        self._pending = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = _CHUNK if size is None or size < 0 else size
        while len(self._pending) < size and not self._eof:
            chunk = self.inner.read(_CHUNK)
            if not chunk:
                self._eof = True
                break
            self._pending += chunk
        if self._eof:
            ready, self._pending = self._pending, b""
        else:
            # Hold back the tail after the last ',' so a number is never split across chunks.
            cut = self._pending.rfind(b",") + 1  # keep the ',' so the lookahead sees it
            if cut <= 0:
                cut = len(self._pending)
            ready, self._pending = self._pending[:cut], self._pending[cut:]
        if self.guard:
            ready = _BIG_INT.sub(rb'\1"\2"', ready)
        self.consumed += len(ready)
        return ready

    def readinto(self, buffer) -> int:  # pragma: no cover - ijson uses read()
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.inner.close()
        super().close()


def iter_json_kvitems(path: Path, prefix: str, expected: str, *,
                      guard: bool = False) -> Iterator[tuple[str, Any]]:
    """The (key, value) members of the object at ``prefix``, one at a time."""
    return _iter_json(path, prefix, expected, guard=guard, kv=True)


def iter_json_items(path: Path, prefix: str, expected: str, *,
                    guard: bool = False) -> Iterator[Any]:
    return _iter_json(path, prefix, expected, guard=guard, kv=False)


def _iter_json(path: Path, prefix: str, expected: str, *, guard: bool,
               kv: bool) -> Iterator[Any]:
    """Yield the objects under ``prefix`` one at a time; map parse errors to TraceFormatError.

    Raises ``IntegerOverflow`` (without ``guard``) so the caller can re-read with the guard on:
    the guard costs a regex pass over the text, so it is only paid by files that need it.
    """
    try:
        stream = GuardedReader(open_binary(path), guard=guard)
    except OSError as exc:
        raise TraceFormatError(str(exc), path=str(path), expected=expected) from None
    with stream:
        try:
            if kv:
                yield from ijson.kvitems(stream, prefix, use_float=True)
            else:
                yield from ijson.items(stream, prefix, use_float=True)
        except ijson.IncompleteJSONError as exc:
            text = str(exc).strip()
            if "integer overflow" in text:
                if not guard:
                    raise IntegerOverflow() from None
                text = "an integer wider than 64 bits where the reader cannot quote it"
            first = text.splitlines()[0] if text else "incomplete JSON"
            raise TraceFormatError(f"JSON is truncated or malformed ({first})", path=str(path),
                                   offset=stream.consumed, expected=expected) from None
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise TraceFormatError(f"compressed stream is damaged ({exc})", path=str(path),
                                   offset=stream.consumed, expected=expected) from None

