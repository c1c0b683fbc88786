"""Column-wise decoding of Kineto events with msgspec: a block of whole events (cut by
``chunked.py``) is decoded into small typed structs that keep only the fields latscope uses,
then each column is built with one comprehension and numpy, not one Python call per event.
Blocks msgspec rejects (an unexpected type in some field) go through the dict path instead.
"""

from __future__ import annotations

import msgspec
import numpy as np

from latscope.trace.model import RangeKind, TraceBuilder

Scalar = int | str | None


class _Args(msgspec.Struct):
    device: Scalar = None
    stream: Scalar = None
    correlation: Scalar = None
    bytes: Scalar = None


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    ts: float | str | None = None
    dur: float | str | None = None
    pid: Scalar = None
    tid: Scalar = None
    args: _Args | None = None


DECODER = msgspec.json.Decoder(list[_Event])
DecodeError = (msgspec.DecodeError, msgspec.ValidationError)


def _int(value: Scalar) -> int:
    if type(value) is int:
        return value
    if value is None:
        return -1
    try:
        return int(value, 0) if isinstance(value, str) else int(value)
    except ValueError:
        return -1


def _ints(values: list) -> np.ndarray:
    if all(type(v) is int for v in values):
        return np.asarray(values, dtype=np.int64)
    return np.asarray([_int(v) for v in values], dtype=np.int64)


def add_events(builder: TraceBuilder, events: list[_Event], gpu_kinds: dict[str, int],
               api_cats: tuple[str, ...], range_kinds: dict[str, int], copy_attrs) -> int:
    """Append decoded events to the builder's tables; returns how many events were seen."""
    xs = [e for e in events if e.ph == "X" and e.ts is not None]
    if not xs:
        return len(events)
    if any(type(e.ts) is str or type(e.dur) is str for e in xs):
        for e in xs:  # rocprof v1 writes strings: convert in place (rare path)
            e.ts, e.dur = float(e.ts), float(e.dur or 0)
    ts = np.asarray([e.ts for e in xs], dtype=np.float64)
    dur = np.asarray([e.dur or 0.0 for e in xs], dtype=np.float64)
    start = np.floor(ts * 1000.0 + 0.5).astype(np.int64)
    end = start + np.floor(dur * 1000.0 + 0.5).astype(np.int64)
    group = {**{c: 0 for c in gpu_kinds}, **{c: 1 for c in api_cats},
             **{c: 2 for c in range_kinds}}
    table = np.asarray([group.get(e.cat, -1) for e in xs], dtype=np.int8)
    _add_gpu(builder, xs, np.flatnonzero(table == 0), start, end, gpu_kinds, copy_attrs)
    _add_api(builder, xs, np.flatnonzero(table == 1), start, end)
    _add_ranges(builder, xs, np.flatnonzero(table == 2), start, end, range_kinds)
    return len(events)


def _add_gpu(builder, xs, idx, start, end, gpu_kinds, copy_attrs) -> None:
    if not len(idx):
        return
    evs = [xs[i] for i in idx]
    names = builder.names.intern_many([e.name for e in evs])
    kinds = [gpu_kinds[e.cat] for e in evs]
    attrs = [copy_attrs(n, k, e.name) for n, k, e in zip(names, kinds, evs)]
    args = [e.args or _EMPTY for e in evs]
    builder.gpu.extend(
        kind=kinds,
        device=_ints([a.device if a.device is not None else e.pid for a, e in zip(args, evs)]),
        stream=_ints([a.stream if a.stream is not None else e.tid for a, e in zip(args, evs)]),
        start=start[idx], end=end[idx], name=names,
        corr=_ints([a.correlation for a in args]), bytes=_ints([a.bytes for a in args]),
        copy=[a[0] for a in attrs], hostmem=[a[1] for a in attrs])


def _add_api(builder, xs, idx, start, end) -> None:
    if not len(idx):
        return
    evs = [xs[i] for i in idx]
    builder.api.extend(
        start=start[idx], end=end[idx], pid=_ints([e.pid for e in evs]),
        tid=_ints([e.tid for e in evs]), name=builder.names.intern_many([e.name for e in evs]),
        corr=_ints([(e.args or _EMPTY).correlation for e in evs]))


def _add_ranges(builder, xs, idx, start, end, range_kinds) -> None:
    if not len(idx):
        return
    evs = [xs[i] for i in idx]
    kinds = np.asarray([range_kinds[e.cat] for e in evs], dtype=np.int8)
    pid = _ints([e.pid for e in evs])
    builder.ranges.extend(
        kind=kinds, start=start[idx], end=end[idx], pid=pid, tid=_ints([e.tid for e in evs]),
        device=np.where(kinds == RangeKind.GPU_ANNOTATION, pid, -1),
        name=builder.names.intern_many([e.name for e in evs]))


_EMPTY = _Args()
