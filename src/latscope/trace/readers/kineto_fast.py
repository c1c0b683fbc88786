"""Column-wise decoding of Kineto events with msgspec: a block of whole events (cut by
``chunked.py``) is decoded into small typed structs that keep only the fields latscope uses,
then each column is built with one comprehension and numpy, not one Python call per event.
Blocks msgspec rejects (an unexpected type in some field) go through the dict path instead.
"""

from __future__ import annotations

import math
from typing import Mapping

import msgspec
import numpy as np

from latscope.trace.model import (
    MAX_TIME_NS,
    NOT_A_NUMBER,
    NOT_FINITE,
    OUT_OF_RANGE,
    RangeKind,
    TraceBuilder,
    as_id,
)

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


def _ints(values: list) -> np.ndarray:
    if all(type(v) is int for v in values):
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:  # wider than 64 bits: unknown, like any unreadable id
            pass
    return np.asarray([as_id(v) for v in values], dtype=np.int64)


def to_float(value) -> float | None:
    """A Kineto ``ts``/``dur`` (float, int, or rocprof v1's strings) as a float; None if the
    value is no number at all."""
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return math.copysign(1e300, value)
    if type(value) is str:
        try:
            return float(value)
        except ValueError:
            return None
    return None


def span_ns(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start ns, end ns, skip reason or "") from float microseconds. Non-finite values and
    values beyond MAX_TIME_NS are marked here, before an int64 conversion could wrap them;
    negative and over-long durations are left for the model's check when the table is built."""
    reason = np.full(len(ts), "", dtype=object)
    with np.errstate(over="ignore", invalid="ignore"):
        start_f, dur_f = ts * 1000.0, dur * 1000.0
        finite = np.isfinite(start_f) & np.isfinite(dur_f)
        fits = finite & (np.abs(start_f) <= MAX_TIME_NS) & (np.abs(dur_f) <= MAX_TIME_NS)
    reason[~fits] = OUT_OF_RANGE
    reason[~(np.isfinite(ts) & np.isfinite(dur))] = NOT_FINITE
    start = np.floor(np.where(fits, start_f, 0.0) + 0.5).astype(np.int64)
    end = start + np.floor(np.where(fits, dur_f, 0.0) + 0.5).astype(np.int64)
    return start, end, reason


def add_events(builder: TraceBuilder, events: list[_Event], gpu_kinds: Mapping[str, int],
               api_cats: tuple[str, ...], range_kinds: Mapping[str, int], copy_attrs) -> int:
    """Append decoded events to the builder's tables; returns how many events were seen."""
    xs = [e for e in events if e.ph == "X" and e.ts is not None]
    if not xs:
        return len(events)
    ts_raw = [e.ts for e in xs]
    dur_raw = [0.0 if e.dur is None else e.dur for e in xs]
    if all(type(t) is float for t in ts_raw) and all(type(d) is float for d in dur_raw):
        ts, dur = np.asarray(ts_raw, dtype=np.float64), np.asarray(dur_raw, dtype=np.float64)
        no_number = None
    else:  # rocprof v1 strings, ints, or damaged values: one at a time (rare path)
        ts_f, dur_f = [to_float(t) for t in ts_raw], [to_float(d) for d in dur_raw]
        no_number = np.asarray([t is None or d is None for t, d in zip(ts_f, dur_f)])
        ts = np.asarray([0.0 if t is None else t for t in ts_f], dtype=np.float64)
        dur = np.asarray([0.0 if d is None else d for d in dur_f], dtype=np.float64)
    start, end, reason = span_ns(ts, dur)
    if no_number is not None:
        reason[no_number] = NOT_A_NUMBER
    if (reason != "").any():
        bad = reason != ""
        for why, count in zip(*np.unique(reason[bad], return_counts=True)):
            builder.skip(str(why), int(count))
        keep = np.flatnonzero(~bad)
        xs, start, end = [xs[i] for i in keep], start[keep], end[keep]
    group = {**{c: 0 for c in gpu_kinds}, **{c: 1 for c in api_cats},
             **{c: 2 for c in range_kinds}}
    table = np.asarray([group.get(e.cat or "", -1) for e in xs], dtype=np.int8)
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
