"""rocprof v1/v2 output (ROCm/rocprofiler ``bin/tblextr.py``): ``results.csv`` and ``results.json``.

``results.csv`` has one row per kernel dispatch: ``Index,KernelName,gpu-id,queue-id,queue-index,
pid,tid,grd,wgr,lds,scr,arch_vgpr,accum_vgpr,sgpr,wave_size,sig,obj,DispatchNs,BeginNs,EndNs,
CompleteNs,DurationNs`` (ns; older versions lack ``gpu-id``/``queue-id`` and end every line with a
comma). It holds no copies and no API calls, and no correlation id.
``results.json`` is Chrome trace format with ``ts``/``dur`` as *strings* in microseconds; events
sit on pseudo-processes named by ``process_name`` metadata (``dform.py``/``sqlitedb.py``): "COPY"
(copies, ``dev-id``/``stream-id`` in args), "CPU HIP API"/"CPU HSA API", "Markers and Ranges",
"GPU0".. (kernels; "GPU Barriers0".. are skipped). ``ts`` is rebased to the run start while the
``args`` keep absolute ``BeginNs``/``EndNs``; the exact args are used when every event has them.
Copy sizes are not in the copy events: bytes stay unknown (-1). No correlation ids survive.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import numpy as np

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
from latscope.trace.readers.kineto_fast import span_ns, to_float
from latscope.trace.readers.stream import iter_json_items

EXPECTED_CSV = "rocprof v1/v2 results.csv (KernelName, BeginNs, EndNs)"
EXPECTED_JSON = "rocprof v1/v2 results.json (Chrome trace, string ts/dur)"
_CSV_COLS = ("KernelName", "BeginNs", "EndNs")
_COPY_NAMES = {"CopyHostToDevice": CopyDir.H2D, "CopyDeviceToHost": CopyDir.D2H,
               "CopyDeviceToDevice": CopyDir.D2D, "CopyHostToHost": CopyDir.H2H}
_GPU_PROCESS = re.compile(r"GPU ?(\d+)$")  # tblextr.py writes "GPU0"; not "GPU Barriers0"


def read_rocprof_v1_csv(path: Path) -> TraceEvents:
    builder = TraceBuilder()
    intern, append = builder.names.intern, builder.gpu.append_row
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _CSV_COLS if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceFormatError(f"CSV header lacks {', '.join(missing)}", path=str(path),
                                   offset=0, expected=EXPECTED_CSV)
        try:
            for row in reader:  # times as read: the model drops and counts those not a number
                if None in row.values():
                    raise TraceFormatError(f"row {reader.line_num} has fewer fields than the "
                                           "header (truncated or malformed file)",
                                           path=str(path), expected=EXPECTED_CSV)
                append(GpuKind.KERNEL, as_id(row.get("gpu-id") or "0"),
                       as_id(row.get("queue-id") or "-1"), row["BeginNs"], row["EndNs"],
                       intern(row["KernelName"] or ""), -1, -1, CopyDir.NONE, HostMem.NA)
        except csv.Error as exc:
            raise TraceFormatError(f"malformed CSV row {reader.line_num} ({exc})", path=str(path),
                                   expected=EXPECTED_CSV) from None
    meta = TraceMeta(path=str(path), format="rocprof-v1-csv", vendor="amd")
    meta.notes.append("rocprof v1 results.csv holds kernels only (no copies, no API calls)")
    return builder.build(meta)


def read_rocprof_v1_json(path: Path) -> TraceEvents:
    process_names: dict[Any, str] = {}
    events: list[dict[str, Any]] = []
    builder = TraceBuilder()
    # guard: a wide integer (any id) must not stop the reader (ijson's C backend rejects them)
    for ev in iter_json_items(path, "traceEvents.item", EXPECTED_JSON, guard=True):
        if not isinstance(ev, dict):
            builder.skip(NOT_AN_EVENT)
            continue
        ph = ev.get("ph")
        if ph == "M" and ev.get("name") == "process_name":
            process_names[_key(ev.get("pid"))] = as_text(_args(ev).get("name", ""))
        elif ph == "X":
            events.append(ev)
    # ts is rebased (BeginNs/1000 - start) while args.BeginNs is absolute: never mix the clocks.
    exact = all("BeginNs" in _args(ev) and "EndNs" in _args(ev) for ev in events)
    gpus = sorted({int(m.group(1)) for n in process_names.values()
                   if (m := _GPU_PROCESS.match(n))})
    copy_device = gpus[0] if len(gpus) == 1 else -1
    for ev in events:
        span = _span(ev, exact)
        if isinstance(span, str):
            builder.skip(span)
            continue
        pid = _key(ev.get("pid"))
        _append(builder, process_names.get(pid, _default_process(pid)), ev, *span, copy_device)
    meta = TraceMeta(path=str(path), format="rocprof-v1-json", vendor="amd",
                     devices={g: f"GPU {g}" for g in gpus})
    meta.notes.append("rocprof v1 results.json has no copy sizes: bytes and GB/s are unknown")
    if not exact:
        meta.notes.append("times from the rounded ts/dur strings (us), not args BeginNs/EndNs")
    return builder.build(meta)


def _default_process(pid: Any) -> str:
    # rocprof v1's pseudo-pids (ROCm/rocprofiler bin/tblextr.py), used when the metadata events
    # are missing.
    pid = as_id(pid)
    if pid < 0:
        return ""
    return {0: "Markers and Ranges", 1: "COPY", 2: "CPU HIP API"}.get(pid, f"GPU{pid - 6}"
                                                                     if pid >= 6 else "")


def _args(ev: dict[str, Any]) -> dict[str, Any]:
    args = ev.get("args")
    return args if isinstance(args, dict) else {}


def _key(value: Any) -> Any:
    """A pid usable as a dict key (a damaged file may put a list there)."""
    return value if isinstance(value, (int, str, float)) or value is None else repr(value)


def _span(ev: dict[str, Any], exact: bool) -> tuple[Any, Any] | str:
    """(start, end) as read, for the model to check; or why they are no time at all."""
    if exact:
        args = ev["args"]
        return args["BeginNs"], args["EndNs"]
    ts, dur = to_float(ev.get("ts")), to_float(ev.get("dur", 0))
    if ts is None or dur is None:
        return NOT_A_NUMBER
    start, end, reason = span_ns(np.asarray([ts]), np.asarray([dur]))
    return reason[0] if reason[0] else (int(start[0]), int(end[0]))


def _arg_int(args: dict[str, Any], keys: tuple[str, ...], default: int) -> int:
    for key in keys:
        value = as_id(args.get(key))
        if value != -1:
            return value
    return default


def _append(builder: TraceBuilder, process: str, ev: dict[str, Any], start: int, end: int,
            copy_device: int) -> None:
    intern = builder.names.intern
    name, args = as_text(ev.get("name", "")), _args(ev)
    tid = _arg_int(ev, ("tid",), -1)
    if (m := _GPU_PROCESS.match(process)) is not None:
        builder.gpu.append_row(GpuKind.KERNEL, int(m.group(1)),
                               _arg_int(args, ("queue-id", "stream-id"), tid), start, end,
                               intern(name), -1, -1, CopyDir.NONE, HostMem.NA)
    elif process == "COPY":
        device = _arg_int(args, ("dev-id", "gpu-id"), copy_device)
        stream = _arg_int(args, ("stream-id", "queue-id"), tid)
        if name.startswith("Fill"):
            builder.gpu.append_row(GpuKind.MEMSET, device, stream, start, end, intern(name), -1,
                                   -1, CopyDir.NONE, HostMem.NA)
            return
        direction = _COPY_NAMES.get(name, CopyDir.OTHER)
        host = HostMem.UNKNOWN if direction in (CopyDir.H2D, CopyDir.D2H) else HostMem.NA
        builder.gpu.append_row(GpuKind.MEMCPY, device, stream, start, end,
                               intern(f"Memcpy {direction.name}"), -1, -1, direction, host)
    elif process in ("CPU HIP API", "CPU HSA API"):
        builder.api.append_row(start, end, _arg_int(ev, ("pid",), -1), tid, intern(name), -1)
    elif process == "Markers and Ranges":
        builder.ranges.append_row(RangeKind.ANNOTATION, start, end, _arg_int(ev, ("pid",), -1),
                                  tid, -1, intern(name))
