"""Small trace files in every format latscope reads, built from given kernel times (any values,
also impossible ones): for the bad-input tests in tests/unit/trace and the fuzz tests.

Each writer takes ``rows``, one per kernel, as ``(start, end)`` in the format's own units and
types (ns integers for SQLite and CSV; ``(ts, dur)`` in microseconds for the Chrome-trace
formats), writes the smallest file that format detection and the reader accept, and returns the
path to hand to ``read_trace``. A row that is not a pair is written as it is (a bare string inside
``traceEvents``, a non-object record). Layouts follow the formats' public descriptions, as the
readers' docstrings cite them.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path
from typing import Any, Callable

NAME = "void at::native::elementwise_kernel<128, 4>(int, float)"


def _pair(row: Any) -> bool:
    return isinstance(row, tuple) and len(row) == 2


def kineto(path: Path, rows: list[Any]) -> Path:
    events = [{"ph": "X", "cat": "kernel", "name": NAME, "pid": 0, "tid": 7, "ts": r[0],
               "dur": r[1], "args": {"device": 0, "stream": 7, "correlation": i}}
              if _pair(r) else r for i, r in enumerate(rows)]
    path = path / "trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def rocprof_v1_json(path: Path, rows: list[Any]) -> Path:
    """rocprof v1/v2 results.json: ts/dur as strings, kernels on the "GPU0" pseudo-process."""
    events: list[Any] = [{"ph": "M", "name": "process_name", "pid": 6, "args": {"name": "GPU0"}}]
    events += [{"ph": "X", "name": NAME, "pid": 6, "tid": 0, "ts": r[0] if isinstance(r[0], str)
                else str(r[0]), "dur": r[1] if isinstance(r[1], str) else str(r[1])}
               if _pair(r) else r for r in rows]
    path = path / "results.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def rocprofv3_json(path: Path, rows: list[Any]) -> Path:
    records = [{"start_timestamp": r[0], "end_timestamp": r[1], "correlation_id":
                {"internal": i}, "dispatch_info": {"agent_id": {"handle": 1},
                                                   "queue_id": {"handle": 1}, "kernel_id": 1}}
               if _pair(r) else r for i, r in enumerate(rows)]
    doc = {"rocprofiler-sdk-tool": [{
        "agents": [{"id": {"handle": 1}, "type": 2, "name": "gfx942", "product_name": "MI300X"}],
        "kernel_symbols": [{"kernel_id": 1, "kernel_name": NAME}],
        "strings": {"buffer_records": []},
        "buffer_records": {"kernel_dispatch": records, "memory_copy": [], "hip_api": []}}]}
    path = path / "results.json"
    path.write_text(json.dumps(doc))
    return path


def rocprofv3_csv(path: Path, rows: list[Any]) -> Path:
    folder = path / "csv"
    folder.mkdir(exist_ok=True)
    with open(folder / "1_kernel_trace.csv", "w", newline="") as f:
        out = csv.writer(f, quoting=csv.QUOTE_ALL)
        out.writerow(["Kind", "Agent_Id", "Queue_Id", "Kernel_Name", "Correlation_Id",
                      "Start_Timestamp", "End_Timestamp"])
        for i, (start, end) in enumerate(rows):
            out.writerow(["KERNEL_DISPATCH", "Agent 1", 1, NAME, i, start, end])
    return folder


def rocprof_v1_csv(path: Path, rows: list[Any]) -> Path:
    path = path / "results.csv"
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Index", "KernelName", "gpu-id", "queue-id", "BeginNs", "EndNs"])
        for i, (start, end) in enumerate(rows):
            out.writerow([i, NAME, 0, 0, start, end])
    return path


def rocpd(path: Path, rows: list[Any]) -> Path:
    """rocpd schema 3, only what the reader needs: kernel dispatches and their symbol."""
    path = path / "1_results.db"
    conn = sqlite3.connect(path)
    conn.execute('CREATE TABLE rocpd_kernel_dispatch (start, "end", agent_id, queue_id, '
                 "kernel_id)")
    conn.execute("CREATE TABLE rocpd_info_kernel_symbol (id, display_name, kernel_name)")
    conn.execute("INSERT INTO rocpd_info_kernel_symbol VALUES (1, ?, ?)", (NAME, NAME))
    conn.executemany("INSERT INTO rocpd_kernel_dispatch VALUES (?, ?, 0, 1, 1)", rows)
    conn.commit()
    conn.close()
    return path


def nsys(path: Path, rows: list[Any]) -> Path:
    path = path / "report.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO StringIds VALUES (1, ?)", (NAME,))
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, "
                 "correlationId, demangledName)")
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, 1)",
                     [(s, e, i) for i, (s, e) in enumerate(rows)])
    conn.commit()
    conn.close()
    return path


# format -> (writer, whether rows are (ts_us, dur_us) rather than (start_ns, end_ns))
WRITERS: dict[str, tuple[Callable[[Path, list[Any]], Path], bool]] = {
    "kineto": (kineto, True),
    "rocprof-v1-json": (rocprof_v1_json, True),
    "rocprofv3-json": (rocprofv3_json, False),
    "rocprofv3-csv": (rocprofv3_csv, False),
    "rocprof-v1-csv": (rocprof_v1_csv, False),
    "rocpd-sqlite": (rocpd, False),
    "nsys-sqlite": (nsys, False),
}


def good_rows(chrome: bool, n: int = 3) -> list[tuple[Any, Any]]:
    """n valid kernels, 10 us apart, 5 us long, in the format's units."""
    if chrome:
        return [(10.0 * i, 5.0) for i in range(1, n + 1)]
    return [(10_000 * i, 10_000 * i + 5_000) for i in range(1, n + 1)]
