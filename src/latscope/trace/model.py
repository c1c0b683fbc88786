"""The trace event model: every reader turns its format into one ``TraceEvents``.

Events are held in columnar form (one numpy array per field) because traces hold millions of
them and every analysis is a vectorised pass over a few columns. Three tables:

- ``gpu``: GPU activities (kernel, memcpy, memset) with device, stream/queue, start/end (ns),
  bytes, copy direction, host-memory kind and the correlation id of the CPU call that issued it;
- ``api``: CPU runtime/driver calls (``cudaLaunchKernel``, ``hipGraphLaunch`` ...), joined to GPU
  activities by correlation id (one graph launch maps to many kernels);
- ``ranges``: CPU ops, annotations (``ProfilerStep#``, vLLM ``execute_*``), Python functions and
  GPU-side annotations, used for windows and for "what was the CPU doing".

Names are interned: every table stores an index into ``TraceEvents.names``. Times are integer
nanoseconds on the trace's own clock; unknown integers are -1.

Events that cannot be real are dropped when a table is built, and counted by reason
(``TraceMeta.skipped``), whichever reader produced them: a time that is not a number, NaN or
infinite, beyond ``MAX_TIME_NS`` (2**62 ns, 146 years: any epoch or boot clock fits, and no
difference of two times can overflow int64), a negative duration, or one longer than
``MAX_DURATION_NS``. Readers skip what they cannot even turn into a row (a bare string inside
``traceEvents``) through ``TraceBuilder.skip``. A trace whose GPU activities were all dropped is
refused, so no analysis ever runs on what is left of impossible input.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from latscope.errors import TraceFormatError

MAX_TIME_NS = 1 << 62
MAX_DURATION_NS = 86_400 * 10**9  # a day: no profiled activity, CPU or GPU, lasts longer

# Why an event was skipped (the keys of TraceMeta.skipped).
NOT_AN_EVENT = "not an event object"
NOT_A_NUMBER = "time is not a number"
NOT_FINITE = "time is NaN or infinite"
OUT_OF_RANGE = "time beyond 2**62 ns"
NEGATIVE_DURATION = "negative duration"
TOO_LONG = "duration longer than a day"


class GpuKind(enum.IntEnum):
    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2


class CopyDir(enum.IntEnum):
    NONE = 0  # not a copy
    H2D = 1
    D2H = 2
    D2D = 3
    H2H = 4
    P2P = 5
    OTHER = 6


class HostMem(enum.IntEnum):
    NA = 0  # no host side (kernel, D2D, memset on device)
    UNKNOWN = 1  # the format does not say (ROCm, rocprofv3 CSV)
    PINNED = 2
    PAGEABLE = 3
    MANAGED = 4


class RangeKind(enum.IntEnum):
    CPU_OP = 0
    ANNOTATION = 1  # user annotation on a CPU thread (record_function, NVTX, roctx)
    PYTHON = 2
    GPU_ANNOTATION = 3  # the GPU-side projection of an annotation (Kineto gpu_user_annotation)
    SYNC = 4  # CUPTI synchronization records (Stream Sync, Event Sync ...)


TIME_COLUMNS = ("start", "end")
# A table's columns: each name and the numpy scalar type its array holds
Schema = dict[str, type[np.generic]]
GPU_COLUMNS: Schema = {
    "kind": np.int8, "device": np.int32, "stream": np.int64, "start": np.int64, "end": np.int64,
    "name": np.int32, "corr": np.int64, "bytes": np.int64, "copy": np.int8, "hostmem": np.int8,
}
API_COLUMNS: Schema = {
    "start": np.int64, "end": np.int64, "pid": np.int64, "tid": np.int64, "name": np.int32,
    "corr": np.int64,
}
RANGE_COLUMNS: Schema = {
    "kind": np.int8, "start": np.int64, "end": np.int64, "pid": np.int64, "tid": np.int64,
    "device": np.int32, "name": np.int32,
}


class Table:
    """A set of equally long numpy columns, addressed as attributes (``t.start``)."""

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def take(self, index: np.ndarray) -> Table:
        return Table({k: v[index] for k, v in self.columns.items()})


class TableBuilder:
    """Appends rows into Python lists (cheap while streaming), then freezes them into arrays."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.lists: dict[str, list] = {k: [] for k in schema}
        self.chunks: dict[str, list[np.ndarray]] = {k: [] for k in schema}
        self.append_row = self._make_appender()

    def extend(self, **columns: Any) -> None:
        """Append a block of rows given column-wise (every column of the schema, equal length)."""
        for key, dtype in self.schema.items():
            self.chunks[key].append(np.asarray(columns[key], dtype=dtype))

    def _make_appender(self):
        appenders = [self.lists[k].append for k in self.schema]

        def append_row(*values: Any) -> None:
            for append, value in zip(appenders, values):
                append(value)

        return append_row

    def build(self, skipped: Counter | None = None) -> Table:
        """Freeze into arrays, dropping the rows that cannot be real (counted in ``skipped``)."""
        bad: np.ndarray | None = None
        columns = {}
        for key, dtype in self.schema.items():
            values, why = _column(self.lists[key], dtype, key in TIME_COLUMNS)
            columns[key] = np.concatenate([values, *self.chunks[key]])
            if why is not None:
                bad = why if bad is None else np.where(bad == "", why, bad)
        table = Table(columns)
        if "start" not in columns:
            return table
        reason = _time_problems(table.start, table.end)
        if bad is not None:  # unconvertible values: only in the row-wise lists, at the front
            reason[:len(bad)] = np.where(bad != "", bad, reason[:len(bad)])
        drop = reason != ""
        if not drop.any():
            return table
        if skipped is not None:
            skipped.update(dict(zip(*np.unique(reason[drop], return_counts=True))))
        return table.take(np.flatnonzero(~drop))


def _column(values: list, dtype: Any, is_time: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The list as an array; with the reason per row ("" = fine) when some value would not
    convert. Ids that do not convert become -1 (unknown), times mark their row for dropping."""
    try:
        array = np.asarray(values, dtype=dtype)
        if array.ndim == 1:  # a list of equal-length lists would make a 2-D array
            return array, None
    except (OverflowError, TypeError, ValueError):
        pass
    info = np.iinfo(dtype)
    out = np.empty(len(values), dtype=dtype)
    why = np.full(len(values), "", dtype=object)
    for i, value in enumerate(values):
        number, problem = as_int(value)
        if problem is None and not info.min <= number <= info.max:
            problem = OUT_OF_RANGE
        if problem is not None:
            number = -1
            if is_time:
                why[i] = problem
        out[i] = number
    return out, (why if is_time else None)


def _time_problems(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row, why its [start, end) cannot be a real event ("" when it can)."""
    reason = np.full(len(start), "", dtype=object)
    out_of_range = (np.abs(start) > MAX_TIME_NS) | (np.abs(end) > MAX_TIME_NS) \
        | (start == np.iinfo(np.int64).min) | (end == np.iinfo(np.int64).min)
    duration = np.where(out_of_range, 0, end - start)  # safe: both within 2**62 elsewhere
    reason[duration > MAX_DURATION_NS] = TOO_LONG
    reason[duration < 0] = NEGATIVE_DURATION
    reason[out_of_range] = OUT_OF_RANGE
    return reason


def as_int(value: Any) -> tuple[int, str | None]:
    """(integer, None) for an int, a finite float or a numeric string; (-1, reason) else."""
    if type(value) is int:
        return value, None
    if isinstance(value, float):
        return (int(value), None) if math.isfinite(value) else (-1, NOT_FINITE)
    if isinstance(value, str):
        try:
            return int(value, 0), None
        except ValueError:
            try:
                return as_int(float(value))
            except ValueError:
                return -1, NOT_A_NUMBER
    return -1, NOT_A_NUMBER  # None, bool, dict, list ...


def as_id(value: Any) -> int:
    """An identifier (device, stream, correlation id, bytes): -1 when unknown or not an int64."""
    number, problem = as_int(value)
    return number if problem is None and -(1 << 63) <= number < (1 << 63) else -1


def as_text(value: Any) -> str:
    """A name as text, whatever the file held there (null, a number, a list ...)."""
    return value if type(value) is str else "" if value is None else str(value)


class Names:
    """String interning: name -> small int, shared by all tables of one trace."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def intern(self, name: str) -> int:
        if type(name) is not str:  # a damaged file can hold anything where a name belongs
            name = as_text(name)
        idx = self.index.get(name)
        if idx is None:
            idx = self.index[name] = len(self.values)
            self.values.append(name)
        return idx

    def intern_many(self, names: list[str]) -> list[int]:
        """Bulk ``intern``: a new name gets id ``len(index)`` at insertion, so the dict's
        insertion order *is* the id order and ``values`` is its tail."""
        index = self.index
        ids = [index.setdefault(n, len(index)) for n in names]
        if len(index) > len(self.values):
            self.values.extend(list(index)[len(self.values):])
        return ids


@dataclass
class TraceMeta:
    path: str
    format: str  # one of latscope.trace.readers.FORMATS
    vendor: str  # "amd" | "nvidia" | "unknown"
    devices: dict[int, str] = field(default_factory=dict)  # device id -> product name
    rank: int | None = None
    notes: list[str] = field(default_factory=list)  # what the reader assumed or could not read
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> events dropped as unreal
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TraceEvents:
    meta: TraceMeta
    names: list[str]
    gpu: Table
    api: Table
    ranges: Table

    def name_array(self, ids: np.ndarray) -> np.ndarray:
        """Names for an id column, as an object array (for display only, never in hot loops)."""
        values = np.asarray(self.names, dtype=object)
        return values[ids] if len(ids) else np.asarray([], dtype=object)


class TraceBuilder:
    """What readers fill: three table builders plus one name table."""

    def __init__(self) -> None:
        self.names = Names()
        self.gpu = TableBuilder(GPU_COLUMNS)
        self.api = TableBuilder(API_COLUMNS)
        self.ranges = TableBuilder(RANGE_COLUMNS)
        self.skipped: Counter = Counter()

    def skip(self, reason: str, count: int = 1) -> None:
        """Count events a reader could not turn into a row."""
        self.skipped[reason] += count

    def build(self, meta: TraceMeta) -> TraceEvents:
        gpu = self.gpu.build(self.skipped)
        api, ranges = self.api.build(self.skipped), self.ranges.build(self.skipped)
        meta.skipped = {str(k): int(v) for k, v in self.skipped.most_common()}
        if meta.skipped:
            meta.notes.append(skipped_text(meta.skipped))
            if len(gpu) == 0:
                raise TraceFormatError("no GPU activity left to analyse: "
                                       + skipped_text(meta.skipped), path=meta.path)
        order = np.lexsort((gpu.end, gpu.start))
        return TraceEvents(meta=meta, names=self.names.values, gpu=gpu.take(order), api=api,
                           ranges=ranges)


def skipped_text(skipped: dict[str, int]) -> str:
    """'skipped 12 events that cannot be real (10 negative duration, 2 time is not a number)'"""
    total = sum(skipped.values())
    parts = ", ".join(f"{n} {reason}" for reason, n in skipped.items())
    return f"skipped {total} event{'s' if total != 1 else ''} that cannot be real ({parts})"
