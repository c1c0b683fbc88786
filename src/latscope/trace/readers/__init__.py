"""Trace readers: detect a file's format from its content, then hand it to one reader module.

Detection looks at bytes, not the file name: gzip magic (then the decompressed head), the SQLite
magic plus the tables inside, the top-level JSON keys, or a CSV header. Every reader returns a
``latscope.trace.model.TraceEvents``; any file that is not a trace, or is cut short, raises
``TraceFormatError`` naming the expected format and the byte offset where reading stopped; a file
or folder that cannot be read at all (permissions, a vanished file) raises it with the OS's reason.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

from latscope.errors import TraceFormatError
from latscope.trace.model import TraceEvents
from latscope.trace.readers.stream import GZIP_MAGIC

SQLITE_MAGIC = b"SQLite format 3\x00"
FORMATS = ("kineto", "rocprofv3-json", "rocprofv3-csv", "nsys-sqlite", "rocpd-sqlite",
           "rocprof-v1-csv", "rocprof-v1-json")
_HEAD_BYTES = 1 << 20


def detect_format(path: Path) -> str:
    """Return one of ``FORMATS`` for ``path`` (a file or a rocprofv3 CSV folder)."""
    if path.is_dir():
        os.listdir(path)  # an unreadable folder: say so, not "holds no CSV" (read_trace maps it)
        if any(path.glob("*kernel_trace.csv")) or any(path.glob("*memory_copy_trace.csv")):
            return "rocprofv3-csv"
        raise TraceFormatError("folder holds no rocprofv3 *kernel_trace.csv", path=str(path),
                               expected="rocprofv3 CSV folder")
    if not path.is_file():
        raise TraceFormatError("no such file", path=str(path))
    with open(path, "rb") as raw:
        magic = raw.read(16)
    if magic.startswith(SQLITE_MAGIC) or _gz_head(path, 16).startswith(SQLITE_MAGIC):
        return _detect_sqlite(path)
    head = _gz_head(path, _HEAD_BYTES) if magic.startswith(GZIP_MAGIC) else _head(path)
    text = head.lstrip()
    if not text:
        raise TraceFormatError("file is empty", path=str(path), offset=0,
                               expected="a trace (Kineto JSON, rocprofv3, nsys SQLite)")
    if text[:1] in (b"{", b"["):
        if b'"rocprofiler-sdk-tool"' in head:
            return "rocprofv3-json"
        if re.search(rb'"ts"\s*:\s*"', head):  # rocprof v1/v2 writes ts/dur as strings
            return "rocprof-v1-json"
        if b'"traceEvents"' in head or b'"ph"' in head:
            return "kineto"
    first_line = text.split(b"\n", 1)[0]
    if b"KernelName" in first_line and b"BeginNs" in first_line:
        return "rocprof-v1-csv"
    if b"Kernel_Name" in first_line or b"MEMORY_COPY" in text[:4096]:
        return "rocprofv3-csv"
    raise TraceFormatError("not a recognised trace", path=str(path), offset=0,
                           expected="Kineto JSON, rocprofv3 JSON/CSV or nsys SQLite")


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(_HEAD_BYTES)


def _gz_head(path: Path, size: int) -> bytes:
    """Up to ``size`` decompressed bytes (plain bytes when not gzip). zlib directly, not GzipFile:
    GzipFile raises EOFError on a truncated .gz and loses its head, which detection needs;
    corrupt deflate data is a format error."""
    with open(path, "rb") as raw:
        if raw.read(2) != GZIP_MAGIC:
            raw.seek(0)
            return raw.read(size)
        raw.seek(0)
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # 16+: expect a gzip header
        head = bytearray()
        try:
            while len(head) < size and not inflater.eof:
                chunk = raw.read(1 << 16)
                if not chunk:
                    break
                head += inflater.decompress(chunk, size - len(head))
                while inflater.unconsumed_tail and len(head) < size:
                    head += inflater.decompress(inflater.unconsumed_tail, size - len(head))
        except zlib.error as exc:
            raise TraceFormatError(f"corrupt gzip data ({exc})", path=str(path), offset=0,
                                   expected="a gzip-compressed trace") from None
    return bytes(head[:size])


def _detect_sqlite(path: Path) -> str:
    from latscope.trace.readers.sqlite_util import SQLITE_ERRORS, open_sqlite

    with open_sqlite(path) as conn:
        try:
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except SQLITE_ERRORS as exc:
            raise TraceFormatError(f"unreadable SQLite file ({exc})", path=str(path), offset=0,
                                   expected="nsys or rocpd SQLite") from None
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables or "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        return "nsys-sqlite"
    if any(t.startswith("rocpd_") for t in tables):
        return "rocpd-sqlite"
    raise TraceFormatError("SQLite file has no nsys (CUPTI_ACTIVITY_KIND_*) or rocpd tables",
                           path=str(path), offset=0, expected="nsys or rocpd SQLite")


def read_trace(path: str | Path, fmt: str | None = None) -> TraceEvents:
    """Read any supported trace into the event model (format detected unless ``fmt`` is given)."""
    path = Path(path)
    try:
        return _read(path, fmt or detect_format(path))
    except OSError as exc:  # permissions, a file removed while read, an I/O error
        where = exc.filename or path
        raise TraceFormatError(f"cannot read {'folder' if Path(where).is_dir() else 'file'}: "
                               f"{exc.strerror or exc}", path=str(where)) from None


def _read(path: Path, fmt: str) -> TraceEvents:
    if fmt == "kineto":
        from latscope.trace.readers.kineto import read_kineto
        return read_kineto(path)
    if fmt == "rocprofv3-json":
        from latscope.trace.readers.rocprofv3_json import read_rocprofv3_json
        return read_rocprofv3_json(path)
    if fmt == "rocprofv3-csv":
        from latscope.trace.readers.rocprofv3_csv import read_rocprofv3_csv
        return read_rocprofv3_csv(path)
    if fmt == "nsys-sqlite":
        from latscope.trace.readers.nsys_sqlite import read_nsys_sqlite
        return read_nsys_sqlite(path)
    if fmt == "rocpd-sqlite":
        from latscope.trace.readers.rocpd import read_rocpd
        return read_rocpd(path)
    if fmt in ("rocprof-v1-csv", "rocprof-v1-json"):
        from latscope.trace.readers import rocprof_v1
        return (rocprof_v1.read_rocprof_v1_csv if fmt == "rocprof-v1-csv"
                else rocprof_v1.read_rocprof_v1_json)(path)
    raise TraceFormatError(f"unknown format {fmt!r}", path=str(path), expected=", ".join(FORMATS))
