"""Opening SQLite trace exports (nsys, rocpd), also when gzip-compressed: SQLite cannot read a
compressed file, so a ``.gz`` is streamed into a temporary file that is removed on close.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from latscope.trace.readers.stream import GZIP_MAGIC, open_binary


@contextlib.contextmanager
def open_sqlite(path: Path) -> Iterator[sqlite3.Connection]:
    with open(path, "rb") as f:
        compressed = f.read(2) == GZIP_MAGIC
    tmp_path: Path | None = None
    try:
        if compressed:
            with tempfile.NamedTemporaryFile(suffix=".sqlite", delete=False) as tmp, \
                    open_binary(path) as src:
                shutil.copyfileobj(src, tmp, 1 << 20)
                tmp_path = Path(tmp.name)
        target = tmp_path or path
        conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
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
