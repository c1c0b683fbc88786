"""PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip, CUDA and ROCm flavours.

Events are streamed with ijson (C backend) from ``traceEvents``; nothing holds the JSON text.
The small metadata block (``deviceProperties``, ``distributedInfo``, runtime versions) is parsed
from the bytes before the ``"traceEvents"`` key, where Kineto writes it. ``ts``/``dur`` are float
microseconds and become integer nanoseconds. rocprof v1 ``results.json`` (same Chrome layout,
``ts``/``dur`` as strings) goes through the same path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from latscope.trace.model import (
    CopyDir, GpuKind, HostMem, RangeKind, TraceBuilder, TraceEvents, TraceMeta,
)
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
    m = _COPY_NAME.search(name)
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
    try:
        meta_json = read_metadata(path)
    except (OSError, EOFError):
        meta_json = {}
    try:
        return _read_events(path, meta_json, guard=False)
    except IntegerOverflow:
        return _read_events(path, meta_json, guard=True)


def _read_events(path: Path, meta_json: dict[str, Any], *, guard: bool) -> TraceEvents:
    builder = TraceBuilder()
    gpu_append, api_append = builder.gpu.append_row, builder.api.append_row
    range_append, intern = builder.ranges.append_row, builder.names.intern
    copy_cache: dict[tuple[int, int], tuple[int, int]] = {}
    seen = 0
    prefix = "traceEvents.item"
    if _is_bare_list(path):
        prefix = "item"
    for ev in iter_json_items(path, prefix, EXPECTED, guard=guard):
        seen += 1
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        ts, dur = ev.get("ts"), ev.get("dur", 0)
        if ts is None:
            continue
        if type(ts) is str or type(dur) is str:  # rocprof v1 results.json writes strings
            ts, dur = float(ts), float(dur or 0)
        start = int(ts * 1000.0 + 0.5)
        end = start + int(dur * 1000.0 + 0.5)
        args = ev.get("args") or {}
        if cat in _GPU_KIND:
            kind = _GPU_KIND[cat]
            name_id = intern(ev.get("name", ""))
            key = (name_id, kind)
            attrs = copy_cache.get(key)
            if attrs is None:
                attrs = copy_cache[key] = copy_attributes(ev.get("name", ""), kind)
            device = args.get("device", ev.get("pid"))
            stream = args.get("stream", ev.get("tid"))
            gpu_append(kind, _as_int(device), _as_int(stream), start, end, name_id,
                       _as_int(args.get("correlation")), _as_int(args.get("bytes")),
                       attrs[0], attrs[1])
        elif cat in _API_CATS:
            api_append(start, end, _as_int(ev.get("pid")), _as_int(ev.get("tid")),
                       intern(ev.get("name", "")), _as_int(args.get("correlation")))
        elif cat in _RANGE_KIND:
            kind = _RANGE_KIND[cat]
            device = _as_int(ev.get("pid")) if kind == RangeKind.GPU_ANNOTATION else -1
            range_append(kind, start, end, _as_int(ev.get("pid")), _as_int(ev.get("tid")),
                         device, intern(ev.get("name", "")))
    meta = _meta(path, meta_json, builder)
    if seen == 0:
        meta.notes.append("the trace holds no events")
    return builder.build(meta)


def _is_bare_list(path: Path) -> bool:
    with open_binary(path) as f:
        return f.read(4096).lstrip()[:1] == b"["


def _as_int(value: Any) -> int:
    if value is None:
        return -1
    if type(value) is int:
        return value
    try:
        return int(value, 0) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        return -1


def _meta(path: Path, data: dict[str, Any], builder: TraceBuilder) -> TraceMeta:
    devices = {int(d.get("id", i)): str(d.get("name", "")) for i, d in
               enumerate(data.get("deviceProperties") or []) if isinstance(d, dict)}
    rank = (data.get("distributedInfo") or {}).get("rank")
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
    for name_id in set(builder.api.lists["name"][:1000]):
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
