"""rocprofv3 ``--output-format json`` (the ``{"rocprofiler-sdk-tool": [...]}`` layout).

Streamed in a few passes (ijson's C ``items`` is ~4x faster per pass than feeding several
coroutines at once): the front sections (agents, kernel symbols, operation-name tables), then the
buffer records for kernel dispatches, memory copies (with ``bytes``), HIP API calls and roctx
markers. Timestamps are already nanoseconds.
rocprofv3 writes 64-bit unsigned ids (``hive_id``) that need the wide-integer guard.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from latscope.trace.model import (
    NOT_AN_EVENT,
    CopyDir,
    GpuKind,
    HostMem,
    RangeKind,
    TraceBuilder,
    TraceEvents,
    TraceMeta,
    as_id,
)
from latscope.trace.readers.stream import iter_json_items, iter_json_kvitems, open_binary

EXPECTED = "rocprofv3 JSON (rocprofiler-sdk-tool)"
_RECORDS = "rocprofiler-sdk-tool.item.buffer_records."
# rocprofiler_memory_copy_operation_t
_COPY_OPS = {1: CopyDir.H2H, 2: CopyDir.H2D, 3: CopyDir.D2H, 4: CopyDir.D2D}


def read_rocprofv3_json(path: Path) -> TraceEvents:
    builder = TraceBuilder()
    agents, symbols, op_names = _read_front(path)
    kernel_ids: list[int] = []
    # Times go into the table as read: the model drops and counts those that are no number.
    for rec in _records(builder, path, "kernel_dispatch"):
        info = _dict(rec.get("dispatch_info"))
        builder.gpu.append_row(
            GpuKind.KERNEL, _handle(info.get("agent_id")), _handle(info.get("queue_id")),
            rec.get("start_timestamp"), rec.get("end_timestamp"), -1,
            _corr(rec), -1, CopyDir.NONE, HostMem.NA)
        kernel_ids.append(as_id(info.get("kernel_id", -1)))
    _name_kernels(builder, kernel_ids, symbols)
    present = _nonempty_record_lists(path)
    if "memory_copy" in present:
        for rec in _records(builder, path, "memory_copy"):
            _append_copy(builder, rec)
    kinds = list(op_names)
    for section in ("hip_api", "marker_api"):
        if section not in present:
            continue
        for rec in _records(builder, path, section):
            name = builder.names.intern(_op_name(rec, kinds, op_names))
            start, end = rec.get("start_timestamp"), rec.get("end_timestamp")
            tid = as_id(rec.get("thread_id", -1))
            if section == "hip_api":
                builder.api.append_row(start, end, -1, tid, name, _corr(rec))
            else:
                builder.ranges.append_row(RangeKind.ANNOTATION, start, end, -1, tid, -1, name)
    return builder.build(_meta(path, agents))


def _records(builder: TraceBuilder, path: Path, section: str):
    """The records of one buffer_records list; anything that is not an object is counted."""
    for rec in iter_json_items(path, f"{_RECORDS}{section}.item", EXPECTED, guard=True):
        if isinstance(rec, dict):
            yield rec
        else:
            builder.skip(NOT_AN_EVENT)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


_NONEMPTY = re.compile(rb'"(memory_copy|hip_api|marker_api)"\s*:\s*\[\s*\{')


def _nonempty_record_lists(path: Path) -> set[str]:
    """Which optional record lists hold records: one cheap byte scan instead of one full JSON
    pass per empty list (a false match only costs an extra pass, never a wrong result)."""
    found: set[str] = set()
    tail = b""
    with open_binary(path) as f:
        while block := f.read(8 << 20):
            text = tail + block
            found.update(m.group(1).decode() for m in _NONEMPTY.finditer(text))
            tail = text[-256:]
    return found


def _read_front(path: Path) -> tuple[dict[int, dict], dict[int, str], dict[str, list[str]]]:
    """Agents, kernel symbols and string tables: the sections before ``buffer_records``."""
    agents: dict[int, dict[str, Any]] = {}
    symbols: dict[int, str] = {}
    op_names: dict[str, list[str]] = {}
    for key, value in iter_json_kvitems(path, "rocprofiler-sdk-tool.item", EXPECTED, guard=True):
        if key == "agents":
            agents = {_handle(a.get("id")): a for a in _dicts(value)}
        elif key == "kernel_symbols":
            symbols = {as_id(k.get("kernel_id", -1)):
                       k.get("demangled_kernel_name") or k.get("kernel_name") or ""
                       for k in _dicts(value)}
        elif key == "strings":
            op_names = {str(r.get("kind")): _list(r.get("operations"))
                        for r in _dicts(_dict(value).get("buffer_records"))}
        if key in ("host_functions", "callback_records", "buffer_records"):
            break  # everything needed is read; the rest is the large record lists
    return agents, symbols, op_names


def _append_copy(builder: TraceBuilder, rec: dict[str, Any]) -> None:
    direction = _COPY_OPS.get(as_id(rec.get("operation", 0)), CopyDir.OTHER)
    host = HostMem.UNKNOWN if direction in (CopyDir.H2D, CopyDir.D2H) else HostMem.NA
    device = _handle(rec.get("dst_agent_id") if direction == CopyDir.H2D
                     else rec.get("src_agent_id"))
    builder.gpu.append_row(
        GpuKind.MEMCPY, device, _handle(rec.get("stream_id")), rec.get("start_timestamp"),
        rec.get("end_timestamp"), builder.names.intern(f"Memcpy {direction.name}"), _corr(rec),
        as_id(rec.get("bytes", -1)), direction, host)


def _op_name(rec: dict[str, Any], kinds: list[str], op_names: dict[str, list[str]]) -> str:
    # Buffer record kinds are numbered in the order of strings.buffer_records.
    kind, op = as_id(rec.get("kind", -1)), as_id(rec.get("operation", -1))
    table = op_names.get(kinds[kind], []) if 0 <= kind < len(kinds) else []
    return table[op] if 0 <= op < len(table) else f"operation {op}"


def _handle(value: Any) -> int:
    if isinstance(value, dict):
        value = value.get("handle", -1)
    return as_id(value)


def _corr(rec: dict[str, Any]) -> int:
    corr = rec.get("correlation_id")
    if isinstance(corr, dict):
        corr = corr.get("internal", -1)
    return as_id(corr)


def _name_kernels(builder: TraceBuilder, kernel_ids: list[int], symbols: dict[int, str]) -> None:
    names = builder.gpu.lists["name"]
    intern = builder.names.intern
    cache: dict[int, int] = {}
    for i, kid in enumerate(kernel_ids):
        if kid == -2:
            continue
        name_id = cache.get(kid)
        if name_id is None:
            name_id = cache[kid] = intern(symbols.get(kid, f"kernel_id {kid}"))
        names[i] = name_id


def _meta(path: Path, agents: dict[int, dict[str, Any]]) -> TraceMeta:
    devices = {handle: str(a.get("product_name") or a.get("name") or "")
               for handle, a in agents.items() if a.get("type") == 2}
    meta = TraceMeta(path=str(path), format="rocprofv3-json", vendor="amd", devices=devices)
    meta.extra["gfx"] = sorted({str(a.get("name")) for a in agents.values() if a.get("type") == 2})
    meta.notes.append("device ids are rocprofiler agent handles")
    return meta

