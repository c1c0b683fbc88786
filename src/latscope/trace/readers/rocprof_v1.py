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

from latscope.errors import TraceFormatError
from latscope.trace.model import (
    CopyDir,
    GpuKind,
    HostMem,
    RangeKind,
    TraceBuilder,
    TraceEvents,
    TraceMeta,
)
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
            for row in reader:
                line = reader.line_num
                append(GpuKind.KERNEL, _int(row.get("gpu-id") or "0", path, line, "gpu-id"),
                       _int(row.get("queue-id") or "-1", path, line, "queue-id"),
                       _int(row["BeginNs"], path, line, "BeginNs"),
                       _int(row["EndNs"], path, line, "EndNs"), intern(row["KernelName"] or ""),
                       -1, -1, CopyDir.NONE, HostMem.NA)
        except csv.Error as exc:
            raise TraceFormatError(f"malformed CSV row {reader.line_num} ({exc})", path=str(path),
                                   expected=EXPECTED_CSV) from None
    meta = TraceMeta(path=str(path), format="rocprof-v1-csv", vendor="amd")
    meta.notes.append("rocprof v1 results.csv holds kernels only (no copies, no API calls)")
    return builder.build(meta)


def _int(value: str | None, path: Path, line: int, column: str) -> int:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceFormatError(f"row {line}: column {column} is not an integer ({value!r}); the "
                               "row may be truncated", path=str(path), expected=EXPECTED_CSV) \
            from None


def read_rocprof_v1_json(path: Path) -> TraceEvents:
    process_names: dict[Any, str] = {}
    events: list[dict[str, Any]] = []
    for ev in iter_json_items(path, "traceEvents.item", EXPECTED_JSON):
        ph = ev.get("ph")
        if ph == "M" and ev.get("name") == "process_name":
            process_names[ev.get("pid")] = str((ev.get("args") or {}).get("name", ""))
        elif ph == "X":
            events.append(ev)
    # ts is rebased (BeginNs/1000 - start) while args.BeginNs is absolute: never mix the clocks.
    exact = all("BeginNs" in (ev.get("args") or {}) and "EndNs" in ev["args"] for ev in events)
    gpus = sorted({int(m.group(1)) for n in process_names.values()
                   if (m := _GPU_PROCESS.match(n))})
    copy_device = gpus[0] if len(gpus) == 1 else -1
    builder = TraceBuilder()
    for ev in events:
        start, end = _span(ev, path, exact)
        _append(builder, process_names.get(ev.get("pid"), _default_process(ev.get("pid"))), ev,
                start, end, copy_device)
    meta = TraceMeta(path=str(path), format="rocprof-v1-json", vendor="amd",
                     devices={g: f"GPU {g}" for g in gpus})
    meta.notes.append("rocprof v1 results.json has no copy sizes: bytes and GB/s are unknown")
    if not exact:
        meta.notes.append("times from the rounded ts/dur strings (us), not args BeginNs/EndNs")
    return builder.build(meta)


def _default_process(pid: Any) -> str:
    # rocprof v1's pseudo-pids (ROCm/rocprofiler bin/tblextr.py), used when the metadata events
    # are missing.
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return ""
    return {0: "Markers and Ranges", 1: "COPY", 2: "CPU HIP API"}.get(pid, f"GPU{pid - 6}"
                                                                     if pid >= 6 else "")


def _span(ev: dict[str, Any], path: Path, exact: bool) -> tuple[int, int]:
    args = ev.get("args") or {}
    try:
        if exact:
            return int(args["BeginNs"]), int(args["EndNs"])
        start = round(float(ev["ts"]) * 1000)
        return start, start + round(float(ev.get("dur", 0)) * 1000)
    except (KeyError, TypeError, ValueError):
        raise TraceFormatError(f"event {ev.get('name')!r} has no readable ts/dur", path=str(path),
                               expected=EXPECTED_JSON) from None


def _arg_int(args: dict[str, Any], keys: tuple[str, ...], default: int) -> int:
    for key in keys:
        text = str(args.get(key, "")).strip()
        if text.lstrip("-").isdigit():
            return int(text)
    return default


def _append(builder: TraceBuilder, process: str, ev: dict[str, Any], start: int, end: int,
            copy_device: int) -> None:
    intern = builder.names.intern
    name, args = str(ev.get("name", "")), ev.get("args") or {}
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
