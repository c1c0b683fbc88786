"""Opening SQLite trace exports (nsys, rocpd), also when gzip-compressed: SQLite cannot read a
compressed file, so a ``.gz`` is streamed into a temporary file that is removed on close.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import sqlite3
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from latscope.errors import TraceFormatError
from latscope.trace.readers.stream import GZIP_MAGIC, open_binary

# What a damaged SQLite file raises: sqlite3's errors, and UnicodeDecodeError when the error
# message quotes non-UTF-8 bytes of the damaged schema (sqlite3 decodes messages as UTF-8).
SQLITE_ERRORS = (sqlite3.Error, UnicodeDecodeError)


@contextlib.contextmanager
def open_sqlite(path: Path) -> Iterator[sqlite3.Connection]:
    with open(path, "rb") as f:
        compressed = f.read(2) == GZIP_MAGIC
    tmp_path: Path | None = None
    try:
        if compressed:
            with tempfile.NamedTemporaryFile(suffix=".sqlite", delete=False) as tmp, \
                    open_binary(path) as src:
                tmp_path = Path(tmp.name)
                try:
                    shutil.copyfileobj(src, tmp, 1 << 20)
                except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                    raise TraceFormatError(f"compressed stream is damaged ({exc})",
                                           path=str(path), expected="a gzip-compressed SQLite "
                                           "trace") from None
        target = (tmp_path or path).resolve()
        try:  # as_uri: a '?' or '#' in the path must not end up in the URI's query
            conn = sqlite3.connect(f"{target.as_uri()}?mode=ro", uri=True)
        except SQLITE_ERRORS as exc:
            raise TraceFormatError(f"cannot open SQLite ({exc})", path=str(path)) from None
        # TEXT that is not UTF-8 (a damaged file) must not raise UnicodeDecodeError mid-query
        conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
        try:
            yield conn
        finally:
            conn.close()
    finally:
        if tmp_path is not None:
            tmp_path.unlink(missing_ok=True)


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
