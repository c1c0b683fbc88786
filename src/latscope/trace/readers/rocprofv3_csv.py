"""rocprofv3 CSV output: a folder of ``<pid>_kernel_trace.csv``, ``memory_copy_trace.csv``,
``hip_api_trace.csv`` (or ``hip_trace.csv``) and ``marker_api_trace.csv``; or one of those files.

Columns are looked up by header name (the SDK added ``Stream_Id`` and renamed columns over time;
``rocpd convert`` prepends ``Guid``). ``Agent_Id`` is ``"Agent N"`` in current SDKs and a bare int
in older ones. The CSV has no copy sizes and no host addresses: bytes stay unknown (-1).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
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
)

EXPECTED = "rocprofv3 CSV (kernel_trace.csv / memory_copy_trace.csv)"
_COPY_DIRS = {
    "MEMORY_COPY_HOST_TO_DEVICE": CopyDir.H2D, "MEMORY_COPY_DEVICE_TO_HOST": CopyDir.D2H,
    "MEMORY_COPY_DEVICE_TO_DEVICE": CopyDir.D2D, "MEMORY_COPY_HOST_TO_HOST": CopyDir.H2H,
}
_KERNEL_COLS = ("Agent_Id", "Queue_Id", "Kernel_Name", "Correlation_Id", "Start_Timestamp",
                "End_Timestamp")
_COPY_COLS = ("Direction", "Source_Agent_Id", "Destination_Agent_Id", "Start_Timestamp",
              "End_Timestamp")
_API_COLS = ("Function", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp")


def read_rocprofv3_csv(path: Path) -> TraceEvents:
    files = _find_files(path)
    if not files:
        raise TraceFormatError("no kernel_trace/memory_copy_trace/hip_api_trace CSV found",
                               path=str(path), expected=EXPECTED)
    builder = TraceBuilder()
    for kind, file in files:
        rows = _rows(file, {"kernel": _KERNEL_COLS, "copy": _COPY_COLS, "api": _API_COLS,
                            "marker": _API_COLS}[kind])
        if kind == "kernel":
            _read_kernels(builder, rows)
        elif kind == "copy":
            _read_copies(builder, rows)
        else:
            _read_api(builder, rows, as_range=kind == "marker")
    meta = TraceMeta(path=str(path), format="rocprofv3-csv", vendor="amd")
    meta.notes.append("rocprofv3 CSV has no copy sizes: bytes and GB/s are unknown")
    meta.extra["files"] = [f.name for _, f in files]
    return builder.build(meta)


def _find_files(path: Path) -> list[tuple[str, Path]]:
    folder = path if path.is_dir() else path.parent
    candidates = sorted(folder.glob("*.csv")) if path.is_dir() else [path]
    if not path.is_dir():  # one file named: take its siblings from the same run (same prefix)
        stem_prefix = path.name.split("kernel_trace")[0] if "kernel_trace" in path.name else None
        if stem_prefix is not None:
            candidates = sorted(folder.glob(f"{stem_prefix}*.csv"))
    found = []
    for file in candidates:
        name = file.name
        if name.endswith("kernel_trace.csv"):
            found.append(("kernel", file))
        elif name.endswith("memory_copy_trace.csv"):
            found.append(("copy", file))
        elif name.endswith(("hip_api_trace.csv", "hip_trace.csv")):
            found.append(("api", file))
        elif name.endswith("marker_api_trace.csv"):
            found.append(("marker", file))
    return found


def _rows(file: Path, required: tuple[str, ...]) -> Iterator[dict[str, str]]:
    with open(file, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceFormatError(f"CSV header lacks {', '.join(missing)}", path=str(file),
                                   offset=0, expected=EXPECTED)
        try:
            for row in reader:
                if None in row.values() or None in row:
                    raise TraceFormatError(
                        f"row {reader.line_num} has {'fewer' if None in row.values() else 'more'}"
                        " fields than the header (truncated or malformed file)", path=str(file),
                        expected=EXPECTED)
                yield row
        except csv.Error as exc:
            raise TraceFormatError(f"malformed CSV row {reader.line_num} ({exc})", path=str(file),
                                   expected=EXPECTED) from None


def _agent(value: str) -> int:
    text = (value or "").strip()
    if text.startswith("Agent"):
        text = text[5:].strip()
    return as_id(text)


# Times are appended as the text read: the model converts them, and drops and counts the rows
# whose times are no number. Ids that are no number become -1 (unknown).


def _read_kernels(builder: TraceBuilder, rows: Iterator[dict[str, str]]) -> None:
    intern, append = builder.names.intern, builder.gpu.append_row
    for row in rows:
        append(GpuKind.KERNEL, _agent(row["Agent_Id"]), as_id(row["Queue_Id"]),
               row["Start_Timestamp"], row["End_Timestamp"], intern(row["Kernel_Name"] or ""),
               as_id(row["Correlation_Id"]), -1, CopyDir.NONE, HostMem.NA)


def _read_copies(builder: TraceBuilder, rows: Iterator[dict[str, str]]) -> None:
    intern, append = builder.names.intern, builder.gpu.append_row
    for row in rows:
        direction = _COPY_DIRS.get(row["Direction"], CopyDir.OTHER)
        host = HostMem.UNKNOWN if direction in (CopyDir.H2D, CopyDir.D2H) else HostMem.NA
        device = _agent(row["Destination_Agent_Id"] if direction == CopyDir.H2D
                        else row["Source_Agent_Id"])
        append(GpuKind.MEMCPY, device, as_id(row.get("Stream_Id")), row["Start_Timestamp"],
               row["End_Timestamp"], intern(f"Memcpy {direction.name}"),
               as_id(row.get("Correlation_Id")), -1, direction, host)


def _read_api(builder: TraceBuilder, rows: Iterator[dict[str, str]], *, as_range: bool) -> None:
    intern = builder.names.intern
    for row in rows:
        start, end = row["Start_Timestamp"], row["End_Timestamp"]
        tid, pid = as_id(row["Thread_Id"]), as_id(row.get("Process_Id"))
        name = intern(row["Function"])
        if as_range:
            builder.ranges.append_row(RangeKind.ANNOTATION, start, end, pid, tid, -1, name)
        else:
            builder.api.append_row(start, end, pid, tid, name, as_id(row["Correlation_Id"]))
