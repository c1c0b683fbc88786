"""PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip, CUDA and ROCm flavours.

Events are streamed: ``chunked.py`` cuts the ``traceEvents`` array into blocks of whole events,
``kineto_fast.py`` decodes each block with msgspec into typed structs and builds the columns
(orjson dicts for blocks with unexpected field types; ijson, C backend, for documents neither
accepts). Nothing holds the whole JSON text. The metadata (``deviceProperties``,
``distributedInfo``, runtime versions) is read from the bytes before the ``"traceEvents"`` key and
after the array, where Kineto writes it. ``ts``/``dur`` are float microseconds and become integer
nanoseconds. rocprof v1 ``results.json`` (same Chrome layout, strings for ``ts``/``dur``) takes
the same path, but no real sample of it was available to test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from latscope.errors import TraceFormatError
from latscope.trace.model import (
    NOT_A_NUMBER,
    NOT_AN_EVENT,
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
from latscope.trace.readers.chunked import ChunkedEvents
from latscope.trace.readers.kineto_fast import DECODER, DecodeError, _Event, add_events, span_ns, to_float
from latscope.trace.readers.stream import IntegerOverflow, iter_json_items, open_binary

EXPECTED = "PyTorch profiler (Kineto) JSON"
_META_LIMIT = 64 << 20
_GPU_KIND = {"kernel": GpuKind.KERNEL, "gpu_memcpy": GpuKind.MEMCPY, "gpu_memset": GpuKind.MEMSET}
_RANGE_KIND = {
    "cpu_op": RangeKind.CPU_OP, "user_annotation": RangeKind.ANNOTATION,
    "python_function": RangeKind.PYTHON, "gpu_user_annotation": RangeKind.GPU_ANNOTATION,
    "cuda_sync": RangeKind.SYNC,
}
_API_CATS = ("cuda_runtime", "cuda_driver")
# "Memcpy HtoD (Pinned -> Device)" (CUDA) / "Memcpy HtoD (Host -> Device)" (ROCm)
_COPY_NAME = re.compile(r"Memcpy\s+(\w+)(?:\s*\((\w+)\s*->\s*(\w+)\))?")
_DIRS = {"HtoD": CopyDir.H2D, "DtoH": CopyDir.D2H, "DtoD": CopyDir.D2D, "HtoH": CopyDir.H2H,
         "PtoP": CopyDir.P2P}
_MEM = {"Pinned": HostMem.PINNED, "Pageable": HostMem.PAGEABLE, "Managed": HostMem.MANAGED,
        "Host": HostMem.UNKNOWN}


def copy_attributes(name: str, kind: int) -> tuple[int, int]:
    """(copy direction, host-memory kind) from a Kineto memcpy/memset name."""
    if kind != GpuKind.MEMCPY:
        return CopyDir.NONE, HostMem.NA
    m = _COPY_NAME.search(as_text(name))
    if not m:
        return CopyDir.OTHER, HostMem.UNKNOWN
    direction = _DIRS.get(m.group(1), CopyDir.OTHER)
    if direction == CopyDir.H2D:
        host = m.group(2)
    elif direction == CopyDir.D2H:
        host = m.group(3)
    else:
        return direction, HostMem.NA
    return direction, _MEM.get(host or "", HostMem.UNKNOWN)


def read_metadata(path: Path) -> dict[str, Any]:
    """The top-level keys Kineto writes before ``traceEvents`` (empty dict if none)."""
    head = b""
    with open_binary(path) as f:
        while len(head) < _META_LIMIT:
            chunk = f.read(1 << 16)
            if not chunk:
                break
            head += chunk
            pos = head.find(b'"traceEvents"')
            if pos >= 0:
                text = head[:pos].rstrip().rstrip(b",")
                try:
                    data = orjson.loads(text + b"}") if text.strip() != b"{" else {}
                except orjson.JSONDecodeError:
                    return {}
                return data if isinstance(data, dict) else {}
    return {}


def read_kineto(path: Path) -> TraceEvents:
    """Fast path: orjson on whole-event blocks. Falls back to ijson (with the wide-integer
    guard) only for files orjson cannot decode, e.g. integers wider than 64 bits."""
    chunks = ChunkedEvents(path, EXPECTED, decode=_decode_block)
    state = _EventSink()
    try:
        for events in chunks:
            state.add(events)
    except TraceFormatError as exc:
        if "exceeds" not in str(exc) and "64-bit" not in str(exc):
            raise
        return _read_with_ijson(path)
    meta_json = {**chunks.tail, **chunks.head}
    return state.finish(path, meta_json)


def _read_with_ijson(path: Path) -> TraceEvents:
    try:
        meta_json = read_metadata(path)
    except (OSError, EOFError):
        meta_json = {}
    prefix = "item" if _is_bare_list(path) else "traceEvents.item"
    for guard in (False, True):
        state = _EventSink()
        try:
            for ev in iter_json_items(path, prefix, EXPECTED, guard=guard):
                state.add((ev,))
        except IntegerOverflow:
            continue
        return state.finish(path, meta_json)
    raise TraceFormatError("unreadable JSON", path=str(path), expected=EXPECTED)


def _decode_block(text: bytes) -> list:
    try:
        return DECODER.decode(text)
    except DecodeError:
        return orjson.loads(text)  # an unexpected field type: the generic dict path


class _EventSink:
    """Turns decoded Kineto events into table rows."""

    def __init__(self) -> None:
        self.builder = TraceBuilder()
        self.copy_cache: dict[tuple[int, int], tuple[int, int]] = {}
        self.seen = 0

    def _copy_attrs(self, name_id: int, kind: int, name: str) -> tuple[int, int]:
        attrs = self.copy_cache.get((name_id, kind))
        if attrs is None:
            attrs = self.copy_cache[(name_id, kind)] = copy_attributes(name, kind)
        return attrs

    def add(self, events) -> None:
        if events and isinstance(events[0], _Event):  # msgspec structs: column-wise path
            self.seen += add_events(self.builder, events, _GPU_KIND, _API_CATS, _RANGE_KIND,
                                    self._copy_attrs)
            return
        rows = []
        for ev in events:
            self.seen += 1
            if type(ev) is not dict:
                self.builder.skip(NOT_AN_EVENT)
                continue
            if ev.get("ph") != "X" or ev.get("ts") is None:
                continue
            dur = ev.get("dur")
            ts, dur = to_float(ev["ts"]), to_float(0.0 if dur is None else dur)
            if ts is None or dur is None:
                self.builder.skip(NOT_A_NUMBER)
                continue
            rows.append((ev, ts, dur))
        if not rows:
            return
        start, end, reason = span_ns(np.asarray([r[1] for r in rows], dtype=np.float64),
                                     np.asarray([r[2] for r in rows], dtype=np.float64))
        for (ev, _, _), s, e, why in zip(rows, start.tolist(), end.tolist(), reason.tolist()):
            if why:
                self.builder.skip(why)
            else:
                self._append(ev, s, e)

    def _append(self, ev: dict[str, Any], start: int, end: int) -> None:
        """One event of the generic dict path (blocks with unexpected field types: any field
        may hold anything, so every read is guarded)."""
        builder = self.builder
        cat = ev.get("cat")
        if type(cat) is not str:
            return
        args = ev.get("args")
        args = args if type(args) is dict else {}
        name = as_text(ev.get("name", ""))
        if cat in _GPU_KIND:
            kind = _GPU_KIND[cat]
            name_id = builder.names.intern(name)
            attrs = self._copy_attrs(name_id, kind, name)
            builder.gpu.append_row(kind, as_id(args.get("device", ev.get("pid"))),
                                   as_id(args.get("stream", ev.get("tid"))), start, end, name_id,
                                   as_id(args.get("correlation")), as_id(args.get("bytes")),
                                   attrs[0], attrs[1])
        elif cat in _API_CATS:
            builder.api.append_row(start, end, as_id(ev.get("pid")), as_id(ev.get("tid")),
                                   builder.names.intern(name), as_id(args.get("correlation")))
        elif cat in _RANGE_KIND:
            range_kind = _RANGE_KIND[cat]
            pid = as_id(ev.get("pid"))
            builder.ranges.append_row(range_kind, start, end, pid, as_id(ev.get("tid")),
                                      pid if range_kind == RangeKind.GPU_ANNOTATION else -1,
                                      builder.names.intern(name))

    def finish(self, path: Path, meta_json: dict[str, Any]) -> TraceEvents:
        meta = _meta(path, meta_json, self.builder)
        if self.seen == 0:
            meta.notes.append("the trace holds no events")
        return self.builder.build(meta)


def _is_bare_list(path: Path) -> bool:
    with open_binary(path) as f:
        return f.read(4096).lstrip()[:1] == b"["


def _meta(path: Path, data: dict[str, Any], builder: TraceBuilder) -> TraceMeta:
    props = data.get("deviceProperties")
    devices = {as_id(d.get("id", i)): as_text(d.get("name", "")) for i, d in
               enumerate(props if isinstance(props, list) else []) if isinstance(d, dict)}
    info = data.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    meta = TraceMeta(path=str(path), format="kineto", vendor=_vendor(data, builder, devices),
                     devices=devices, rank=rank if isinstance(rank, int) else None)
    for key in ("hip_runtime_version", "cuda_runtime_version", "roctracer_version",
                "cupti_version", "vllm_version"):
        if key in data:
            meta.extra[key] = data[key]
    return meta


def _vendor(data: dict[str, Any], builder: TraceBuilder, devices: dict[int, str]) -> str:
    if "hip_runtime_version" in data or "roctracer_version" in data:
        return "amd"
    if "cuda_runtime_version" in data or "cupti_version" in data:
        return "nvidia"
    names = builder.names.values
    api_ids = [*builder.api.lists["name"][:1000],
               *(int(i) for chunk in builder.api.chunks["name"][:1] for i in chunk[:1000])]
    for name_id in set(api_ids):
        if names[name_id].startswith("hip"):
            return "amd"
        if names[name_id].startswith("cu"):
            return "nvidia"
    text = " ".join(devices.values())
    if "AMD" in text or "Instinct" in text:
        return "amd"
    if "NVIDIA" in text:
        return "nvidia"
    return "unknown"
