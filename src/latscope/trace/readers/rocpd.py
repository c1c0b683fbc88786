"""rocpd SQLite (``rocprofv3 --output-format rocpd``, the default since ROCm 7.0), plain or gzipped.

Schema 3 (ROCm/rocm-systems ``rocprofiler-sdk/source/share/rocprofiler-sdk-rocpd/rocpd_tables.sql``):
data tables carry a ``_{uuid}`` suffix with un-suffixed views over them; the views are read, and
the suffixed tables directly when a file lacks the views. Read: ``rocpd_kernel_dispatch`` (start,
end in ns, ``agent_id``, ``queue_id``, ``kernel_id`` -> ``rocpd_info_kernel_symbol``),
``rocpd_memory_copy`` (``name_id`` -> ``rocpd_string`` holds the operation, e.g.
``MEMORY_COPY_HOST_TO_DEVICE``; ``size`` in bytes), ``rocpd_region`` (HIP/HSA API calls and roctx
markers, told apart by their event category), ``rocpd_event`` (``stack_id`` is rocprofiler's
internal correlation id, written for GPU activities and API calls alike, so it is the join key),
``rocpd_info_agent`` (device names; GPUs numbered by ``type_index``). Host-memory kind stays
unknown: rocpd has copy addresses but matching them to pinned allocations is not done here.
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
    as_text,
)
from latscope.trace.readers.sqlite_util import SQLITE_ERRORS, columns, open_sqlite, tables

EXPECTED = "rocpd SQLite (rocprofv3 schema 3)"
_COPY_DIRS = {
    "MEMORY_COPY_HOST_TO_DEVICE": CopyDir.H2D, "MEMORY_COPY_DEVICE_TO_HOST": CopyDir.D2H,
    "MEMORY_COPY_DEVICE_TO_DEVICE": CopyDir.D2D, "MEMORY_COPY_HOST_TO_HOST": CopyDir.H2H,
}
_KERNEL_COLS = ("start", "end", "agent_id", "queue_id", "kernel_id")
_COPY_COLS = ("start", "end", "name_id", "src_agent_id", "dst_agent_id", "size")
_UUID_SUFFIX = re.compile(r"[0-9a-fA-F_-]+")
_HINT = "convert it with `rocpd convert -f csv` and pass the CSV folder"


def read_rocpd(path: Path) -> TraceEvents:
    with open_sqlite(path) as conn:
        try:
            return _read(conn, path)
        except SQLITE_ERRORS as exc:
            raise TraceFormatError(f"unreadable rocpd SQLite ({exc})", path=str(path),
                                   expected=EXPECTED) from None


def _sources(present: set[str], base: str) -> list[str]:
    """The view ``base`` when present, else every ``base_{uuid}`` table (one per merged run)."""
    if base in present:
        return [base]
    # The suffix test keeps e.g. rocpd_event_operation_{uuid} out of rocpd_event's sources.
    return sorted(t for t in present if t.startswith(base + "_")
                  and _UUID_SUFFIX.fullmatch(t[len(base) + 1:]))


def _read(conn: sqlite3.Connection, path: Path) -> TraceEvents:
    present = tables(conn)
    kernel_src = _sources(present, "rocpd_kernel_dispatch")
    copy_src = _sources(present, "rocpd_memory_copy")
    if not kernel_src and not copy_src:
        raise TraceFormatError(f"no rocpd_kernel_dispatch or rocpd_memory_copy table; {_HINT}",
                               path=str(path), offset=0, expected=EXPECTED)
    for src, needed in [(s, _KERNEL_COLS) for s in kernel_src] + [(s, _COPY_COLS) for s in copy_src]:
        missing = [c for c in needed if c not in columns(conn, src)]
        if missing:
            raise TraceFormatError(
                f"{src} lacks {', '.join(missing)} (unsupported rocpd schema); {_HINT}",
                path=str(path), offset=0, expected=EXPECTED)
    strings = _lookup(conn, present, "rocpd_string", "id, string")
    agents = {r[0]: r[1:] for s in _sources(present, "rocpd_info_agent") for r in conn.execute(
        f"SELECT id, type, type_index, COALESCE(product_name, name, '') FROM {s}")}
    # GPUs by type_index; CPU agents get -1 so a host-to-host copy never lands on a GPU's id.
    device = {aid: (aid if idx is None else idx) if typ == "GPU" else -1
              for aid, (typ, idx, _) in agents.items()}
    corr = _event_corr(conn, present)
    builder = TraceBuilder()
    for src in kernel_src:
        _kernels(conn, builder, src, present, device, corr)
    for src in copy_src:
        _copies(conn, builder, src, strings, device, corr)
    _regions(conn, builder, present, strings, corr)
    meta = TraceMeta(path=str(path), format="rocpd-sqlite", vendor="amd")
    meta.devices = {device[a]: name for a, (typ, _, name) in agents.items() if typ == "GPU"}
    meta.notes.append("device ids are rocpd GPU type_index values (agent id when absent); "
                      "host-memory kind of copies is unknown")
    version = _lookup(conn, present, "rocpd_metadata", "tag, value").get("schema_version")
    if version:
        meta.extra["schema_version"] = version
    return builder.build(meta)


def _lookup(conn: sqlite3.Connection, present: set[str], base: str, cols: str) -> dict:
    out: dict = {}
    for src in _sources(present, base):
        out.update(conn.execute(f"SELECT {cols} FROM {src}"))
    return out


def _event_corr(conn: sqlite3.Connection, present: set[str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for src in _sources(present, "rocpd_event"):
        cols = columns(conn, src)
        key = "stack_id" if "stack_id" in cols else "correlation_id" if "correlation_id" in cols \
            else None
        if key:
            out.update(conn.execute(f"SELECT id, {key} FROM {src} WHERE {key} IS NOT NULL"))
    return out


def _kernels(conn: sqlite3.Connection, builder: TraceBuilder, src: str, present: set[str],
             device: dict[int, int], corr: dict[int, int]) -> None:
    symbols = _lookup(conn, present, "rocpd_info_kernel_symbol",
                      "id, COALESCE(display_name, kernel_name, '')")
    event_col = "event_id" if "event_id" in columns(conn, src) else "NULL"
    intern, append = builder.names.intern, builder.gpu.append_row
    cache: dict[int, int] = {}
    for start, end, agent, queue, kid, event in conn.execute(
            f'SELECT start, "end", agent_id, queue_id, kernel_id, {event_col} FROM {src}'):
        name_id = cache.get(kid)
        if name_id is None:
            name_id = cache[kid] = intern(symbols.get(kid) or f"kernel_id {kid}")
        append(GpuKind.KERNEL, device.get(agent, agent), queue, start, end, name_id,
               corr.get(event, -1), -1, CopyDir.NONE, HostMem.NA)


def _copies(conn: sqlite3.Connection, builder: TraceBuilder, src: str, strings: dict[int, str],
            device: dict[int, int], corr: dict[int, int]) -> None:
    cols = columns(conn, src)
    stream = "COALESCE(stream_id, queue_id)" if {"stream_id", "queue_id"} <= set(cols) else "NULL"
    event_col = "event_id" if "event_id" in cols else "NULL"
    intern, append = builder.names.intern, builder.gpu.append_row
    for start, end, name_id, src_agent, dst_agent, size, strm, event in conn.execute(
            f'SELECT start, "end", name_id, src_agent_id, dst_agent_id, size, {stream}, '
            f"{event_col} FROM {src}"):
        direction = _COPY_DIRS.get(as_text(strings.get(name_id)), CopyDir.OTHER)
        host = HostMem.UNKNOWN if direction in (CopyDir.H2D, CopyDir.D2H) else HostMem.NA
        agent = dst_agent if direction == CopyDir.H2D else src_agent
        append(GpuKind.MEMCPY, device.get(agent, -1 if agent is None else agent),
               -1 if strm is None else strm, start, end, intern(f"Memcpy {direction.name}"),
               corr.get(event, -1), -1 if size is None else size, direction, host)


def _regions(conn: sqlite3.Connection, builder: TraceBuilder, present: set[str],
             strings: dict[int, str], corr: dict[int, int]) -> None:
    pids = _lookup(conn, present, "rocpd_info_process", "id, pid")
    tids = _lookup(conn, present, "rocpd_info_thread", "id, tid")
    category: dict[int, int] = {}
    for src in _sources(present, "rocpd_event"):
        if "category_id" in columns(conn, src):
            category.update(conn.execute(f"SELECT id, category_id FROM {src}"))
    intern = builder.names.intern
    for src in _sources(present, "rocpd_region"):
        event_col = "event_id" if "event_id" in columns(conn, src) else "NULL"
        for start, end, name_id, pid, tid, event in conn.execute(
                f'SELECT start, "end", name_id, pid, tid, {event_col} FROM {src}'):
            name = intern(strings.get(name_id, f"string {name_id}"))
            pid, tid = pids.get(pid, pid), tids.get(tid, tid)
            if "MARKER" in as_text(strings.get(category.get(event, -1))).upper():
                builder.ranges.append_row(RangeKind.ANNOTATION, start, end, pid, tid, -1, name)
            else:
                builder.api.append_row(start, end, pid, tid, name, corr.get(event, -1))
