"""One device's GPU activities, ready for analysis: classified (compute / communication / copy
by kernel-name category), with same-queue overlaps clamped on AMD.

MI300X-class firmware can report overlapping or tied timestamps for consecutive dispatches on
the *same* queue (roctracer #104/#105); rocprofv3 itself rewrites them when writing Perfetto. A
queue executes in order, so such an overlap is not concurrency: each start is moved to the end of
the previous activity on that queue, and the number clamped and time removed are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from latscope.trace.model import GpuKind, Table, TraceEvents
from latscope.trace.taxonomy import CATEGORIES, NameTable

COMPUTE, COMM, COPY = 0, 1, 2
_COMM_CAT = CATEGORIES.index("communication")
_COPY_CAT = CATEGORIES.index("copy-as-kernel")


@dataclass
class DeviceActivities:
    device: int
    gpu: Table  # this device's activities, sorted by start (clamped where said)
    role: np.ndarray  # COMPUTE / COMM / COPY per activity
    category: np.ndarray  # index into CATEGORIES (memcpy/memset: copy-as-kernel's index)
    clamp: dict[str, int] = field(default_factory=dict)


def split_devices(trace: TraceEvents, names: NameTable, *,
                  clamp_queues: bool) -> list[DeviceActivities]:
    out = []
    for device in np.unique(trace.gpu.device):
        table = trace.gpu.take(np.flatnonzero(trace.gpu.device == device))
        clamp = {"activities_clamped": 0, "overlap_removed_ns": 0, "overlapping_pairs": 0}
        if clamp_queues:
            table, clamp = clamp_same_queue(table)
        else:
            clamp["overlapping_pairs"] = count_same_queue_overlaps(table)
        is_kernel = table.kind == GpuKind.KERNEL
        category = np.where(is_kernel, names.category[table.name], _COPY_CAT).astype(np.int8)
        role = np.full(len(table), COMPUTE, dtype=np.int8)
        role[category == _COMM_CAT] = COMM
        role[category == _COPY_CAT] = COPY
        out.append(DeviceActivities(int(device), table, role, category, clamp))
    return out


def _queue_order(table: Table) -> np.ndarray:
    return np.lexsort((table.end, table.start, table.stream))


def count_same_queue_overlaps(table: Table) -> int:
    order = _queue_order(table)
    stream, start, end = table.stream[order], table.start[order], table.end[order]
    same = stream[1:] == stream[:-1]
    return int(np.sum(same & (start[1:] < end[:-1])))


def clamp_same_queue(table: Table) -> tuple[Table, dict[str, int]]:
    order = _queue_order(table)
    stream, start, end = table.stream[order], table.start[order].copy(), table.end[order].copy()
    new_start = start.copy()
    boundaries = np.flatnonzero(np.diff(stream)) + 1
    for lo, hi in zip(np.r_[0, boundaries], np.r_[boundaries, len(stream)]):
        if hi - lo < 2:
            continue
        prev_end = np.maximum.accumulate(end[lo:hi])[:-1]
        new_start[lo + 1:hi] = np.maximum(start[lo + 1:hi], prev_end)
    new_end = np.maximum(end, new_start)
    moved = new_start != start
    stats = {"activities_clamped": int(moved.sum()),
             # duration lost, not distance moved: an activity nested inside its predecessor
             # becomes zero-length and loses only its own duration
             "overlap_removed_ns": int(np.sum(np.minimum(new_start, end) - start)),
             "overlapping_pairs": int(moved.sum())}
    columns = {k: v[order] for k, v in table.columns.items()}
    columns["start"], columns["end"] = new_start, new_end
    resort = np.lexsort((new_end, new_start))
    return Table({k: v[resort] for k, v in columns.items()}), stats
