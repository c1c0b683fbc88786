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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np


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


GPU_COLUMNS: dict[str, Any] = {
    "kind": np.int8, "device": np.int32, "stream": np.int64, "start": np.int64, "end": np.int64,
    "name": np.int32, "corr": np.int64, "bytes": np.int64, "copy": np.int8, "hostmem": np.int8,
}
API_COLUMNS: dict[str, Any] = {
    "start": np.int64, "end": np.int64, "pid": np.int64, "tid": np.int64, "name": np.int32,
    "corr": np.int64,
}
RANGE_COLUMNS: dict[str, Any] = {
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

    def __init__(self, schema: dict[str, Any]) -> None:
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

    def build(self) -> Table:
        return Table({k: np.concatenate([np.asarray(self.lists[k], dtype=dt), *self.chunks[k]])
                      for k, dt in self.schema.items()})


class Names:
    """String interning: name -> small int, shared by all tables of one trace."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []

    def intern(self, name: str) -> int:
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

    def build(self, meta: TraceMeta) -> TraceEvents:
        gpu = self.gpu.build()
        order = np.lexsort((gpu.end, gpu.start))
        gpu = gpu.take(order)
        return TraceEvents(meta=meta, names=self.names.values, gpu=gpu, api=self.api.build(),
                           ranges=self.ranges.build())
