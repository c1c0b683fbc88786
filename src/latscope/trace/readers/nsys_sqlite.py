"""Nsight Systems SQLite export (``nsys export --type sqlite``), plain or gzip-compressed.

Tables read: ``CUPTI_ACTIVITY_KIND_KERNEL`` / ``_MEMCPY`` / ``_MEMSET`` (GPU activities),
``CUPTI_ACTIVITY_KIND_RUNTIME`` (CPU API calls, de-duplicated by correlation id because one call
can appear once per ``eventClass``), ``NVTX_EVENTS`` (ranges), ``StringIds`` and
``TARGET_INFO_GPU``. Column sets grow with nsys versions, so columns are looked up with
``PRAGMA table_info``. Memory kinds use nsys' own ``ENUM_CUDA_MEM_KIND`` numbering (0 pageable,
1 pinned, 2 device, 4 managed), which differs from raw CUPTI; old exports lack the enum tables,
so the values are fixed here.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from latscope.errors import TraceFormatError
from latscope.trace.model import (
    CopyDir,
    GpuKind,
    HostMem,
    RangeKind,
    TraceBuilder,
    TraceEvents,
    TraceMeta,
    as_id,
    as_text,
)
from latscope.trace.readers.sqlite_util import SQLITE_ERRORS, columns, open_sqlite, tables

EXPECTED = "nsys SQLite export"
# ENUM_CUDA_MEMCPY_OPER
_COPY_KIND = {1: CopyDir.H2D, 2: CopyDir.D2H, 3: CopyDir.H2D, 4: CopyDir.D2H, 5: CopyDir.D2D,
              6: CopyDir.D2D, 7: CopyDir.D2D, 8: CopyDir.D2D, 9: CopyDir.H2H, 10: CopyDir.P2P,
              11: CopyDir.H2D, 12: CopyDir.D2H, 13: CopyDir.D2D}
# ENUM_CUDA_MEM_KIND (nsys numbering)
_MEM_KIND = {0: HostMem.PAGEABLE, 1: HostMem.PINNED, 4: HostMem.MANAGED, 6: HostMem.MANAGED}
_MEM_LABEL = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
              5: "Device", 6: "Managed", 7: "Unknown"}
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop and start/end ranges (with and without payload)


def read_nsys_sqlite(path: Path) -> TraceEvents:
    with open_sqlite(path) as conn:
        try:
            return _read(conn, path)
        except SQLITE_ERRORS as exc:
            raise TraceFormatError(f"unreadable nsys SQLite ({exc})", path=str(path),
                                   expected=EXPECTED) from None


def _read(conn: sqlite3.Connection, path: Path) -> TraceEvents:
    present = tables(conn)
    strings = dict(conn.execute("SELECT id, value FROM StringIds")) if "StringIds" in present \
        else {}
    builder = TraceBuilder()
    if "CUPTI_ACTIVITY_KIND_KERNEL" in present:
        _kernels(conn, builder, strings)
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in present:
        _memcpys(conn, builder)
    if "CUPTI_ACTIVITY_KIND_MEMSET" in present:
        _memsets(conn, builder)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in present:
        _runtime(conn, builder, strings)
    if "NVTX_EVENTS" in present:
        _nvtx(conn, builder, strings)
    meta = TraceMeta(path=str(path), format="nsys-sqlite", vendor="nvidia")
    if "TARGET_INFO_GPU" in present and "name" in columns(conn, "TARGET_INFO_GPU"):
        meta.devices = {as_id(i): as_text(n) for i, n in conn.execute(
            "SELECT id, name FROM TARGET_INFO_GPU")}
    for table in ("EXPORT_META_DATA", "META_DATA_EXPORT"):
        if table in present:
            meta.extra["export"] = dict(conn.execute(f"SELECT name, value FROM {table}"))
    return builder.build(meta)


def _kernels(conn: sqlite3.Connection, builder: TraceBuilder, strings: dict[int, str]) -> None:
    cols = columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = next((c for c in ("demangledName", "shortName", "mangledName") if c in cols), "NULL")
    intern, append = builder.names.intern, builder.gpu.append_row
    cache: dict[int, int] = {}
    for start, end, dev, stream, corr, name in conn.execute(
            f"SELECT start, end, deviceId, streamId, correlationId, {name_col} "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        name_id = cache.get(name)
        if name_id is None:
            name_id = cache[name] = intern(strings.get(name, name))
        append(GpuKind.KERNEL, dev, stream, start, end, name_id, corr, -1, CopyDir.NONE,
               HostMem.NA)


def _memcpys(conn: sqlite3.Connection, builder: TraceBuilder) -> None:
    intern, append = builder.names.intern, builder.gpu.append_row
    for start, end, dev, stream, corr, nbytes, kind, src, dst in conn.execute(
            "SELECT start, end, deviceId, streamId, correlationId, bytes, copyKind, srcKind, "
            "dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
        direction = _COPY_KIND.get(kind, CopyDir.OTHER)
        host_kind = src if direction == CopyDir.H2D else dst if direction == CopyDir.D2H else None
        host = HostMem.NA if host_kind is None else _MEM_KIND.get(host_kind, HostMem.UNKNOWN)
        label = {CopyDir.H2D: "HtoD", CopyDir.D2H: "DtoH", CopyDir.D2D: "DtoD",
                 CopyDir.H2H: "HtoH", CopyDir.P2P: "PtoP"}.get(direction, "Other")
        name = f"Memcpy {label} ({_MEM_LABEL.get(src, '?')} -> {_MEM_LABEL.get(dst, '?')})"
        append(GpuKind.MEMCPY, dev, stream, start, end, intern(name), corr,
               -1 if nbytes is None else nbytes, direction, host)


def _memsets(conn: sqlite3.Connection, builder: TraceBuilder) -> None:
    cols = columns(conn, "CUPTI_ACTIVITY_KIND_MEMSET")
    kind_col = "memKind" if "memKind" in cols else "NULL"
    intern, append = builder.names.intern, builder.gpu.append_row
    for start, end, dev, stream, corr, nbytes, kind in conn.execute(
            f"SELECT start, end, deviceId, streamId, correlationId, bytes, {kind_col} "
            "FROM CUPTI_ACTIVITY_KIND_MEMSET"):
        name = f"Memset ({_MEM_LABEL.get(kind, 'Device')})"
        append(GpuKind.MEMSET, dev, stream, start, end, intern(name), corr,
               -1 if nbytes is None else nbytes, CopyDir.NONE, HostMem.NA)


def _runtime(conn: sqlite3.Connection, builder: TraceBuilder, strings: dict[int, str]) -> None:
    intern, append = builder.names.intern, builder.api.append_row
    seen: set[int] = set()
    cache: dict[int, int] = {}
    # Longest row first per correlation id, so the de-duplicated row spans the whole call.
    for start, end, gtid, corr, name in conn.execute(
            "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            "ORDER BY correlationId, end - start DESC"):
        if corr in seen:
            continue
        seen.add(corr)
        name_id = cache.get(name)
        if name_id is None:
            name_id = cache[name] = intern(_VERSION_SUFFIX.sub("", as_text(strings.get(name, name))))
        append(start, end, *_pid_tid(gtid), name_id, corr)


def _nvtx(conn: sqlite3.Connection, builder: TraceBuilder, strings: dict[int, str]) -> None:
    cols = columns(conn, "NVTX_EVENTS")
    text_id = "textId" if "textId" in cols else "NULL"
    types = ",".join(str(t) for t in _NVTX_RANGE_TYPES)
    intern = builder.names.intern
    for start, end, gtid, text, tid_text in conn.execute(
            f"SELECT start, end, globalTid, text, {text_id} FROM NVTX_EVENTS "
            f"WHERE end IS NOT NULL AND eventType IN ({types})"):
        name = text if text is not None else strings.get(tid_text, "")
        builder.ranges.append_row(RangeKind.ANNOTATION, start, end, *_pid_tid(gtid), -1,
                                  intern(name))


def _pid_tid(global_tid) -> tuple[int, int]:
    """nsys packs pid and tid into globalTid (bits 24-47 and 0-23); -1, -1 when it is unusable."""
    gtid = as_id(global_tid)
    return ((gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF) if gtid >= 0 else (-1, -1)
