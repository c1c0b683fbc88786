"""Idle gaps of one device and what the CPU was doing during them; launch delay.

- gaps: the complement of the busy union inside the window, with a size distribution;
- each gap is classed by the CPU call that issued the work ending it: ``host_wait`` when that
  call *started after the GPU went idle* (the CPU had not issued the work yet; HTA's HOST_WAIT
  idea), ``queued`` when the work was issued before the gap began (launch latency, a wait on an
  event/another stream), ``unknown`` when no CPU call is correlated (e.g. graph replays);
- CPU activity during idle time: the *self time* (time not inside a child event) of the CPU
  events of the threads that launched this device's work (Python functions, CPU ops, runtime
  calls, annotations), counted only where it lies inside idle time: the innermost thing the
  launching thread was doing while the GPU waited. An event that outlasts its parent (async
  ops, damaged traces) is clipped to it, so the self times of one thread never add up to more
  than its time, and shares of idle are of the launching threads' time during idle (idle time x
  threads): 0-100 % by construction;
- launch delay = GPU start - end of the launching call (per kernel; for a graph launch only the
  first kernel of the graph counts).
"""

from __future__ import annotations

import numpy as np

from latscope.trace.analysis import intervals as iv
from latscope.trace.analysis.device import DeviceActivities
from latscope.trace.analysis.join import GRAPH_LAUNCH, name_flags
from latscope.trace.analysis.window import Window
from latscope.trace.model import RangeKind, Table, TraceEvents
from latscope.trace.results import (
    CpuDuringIdle,
    CpuEvent,
    Gap,
    GapAnalysis,
    GapBucket,
    GapCauses,
    IdleEvent,
    KindTime,
    LaunchDelay,
)

BUCKETS_NS = (0, 10_000, 100_000, 1_000_000, 10_000_000)
BUCKET_LABELS = ("<10us", "10-100us", "100us-1ms", "1-10ms", ">=10ms")
_API = 9  # label code for runtime/driver API calls among CPU events
_RANGE_LABEL = {RangeKind.CPU_OP: "cpu_op", RangeKind.ANNOTATION: "annotation",
                RangeKind.PYTHON: "python", RangeKind.SYNC: "sync"}


def gap_analysis(trace: TraceEvents, dev: DeviceActivities, window: Window,
                 api_row: np.ndarray, top_n: int = 5) -> GapAnalysis:
    gpu = dev.gpu
    busy = iv.union(*iv.clip(gpu.start, gpu.end, window.start, window.end))
    gs, ge = iv.complement(*busy, window.start, window.end)
    glen = ge - gs
    issue_start = _issue_start_of_next(gpu, api_row, trace, ge)
    kind = np.where(issue_start < 0, 2, np.where(issue_start > gs, 0, 1))
    causes = GapCauses(host_wait_ns=int(glen[kind == 0].sum()),
                       queued_ns=int(glen[kind == 1].sum()),
                       unknown_ns=int(glen[kind == 2].sum()))
    cpu = _cpu_events(trace, api_row)
    largest = np.argsort(-glen, kind="stable")[:top_n]
    return GapAnalysis(
        count=int(len(gs)), idle_ns=int(glen.sum()),
        distribution=_distribution(glen),
        by_cause=causes,
        largest=[_describe_gap(trace, cpu, int(gs[i]), int(ge[i]), int(issue_start[i]))
                 for i in largest],
        cpu_during_idle=_cpu_during(trace, cpu, gs, ge),
        launch_delay=launch_delay(trace, gpu, api_row),
    )


def _distribution(glen: np.ndarray) -> list[GapBucket]:
    which = np.searchsorted(np.asarray(BUCKETS_NS), glen, side="right") - 1
    return [GapBucket(bucket=label, count=int((which == i).sum()),
                      time_ns=int(glen[which == i].sum())) for i, label in enumerate(BUCKET_LABELS)]


def _issue_start_of_next(gpu: Table, api_row: np.ndarray, trace: TraceEvents,
                         gap_end: np.ndarray) -> np.ndarray:
    """Start of the CPU call that issued the first activity starting at each gap's end."""
    found = np.searchsorted(gpu.start, gap_end)
    pos = np.clip(found, 0, max(len(gpu.start) - 1, 0))
    if len(gpu.start) == 0 or len(trace.api) == 0:
        return np.full(len(gap_end), -1, dtype=np.int64)
    # a gap that no later activity ends (trailing gap of an explicit window) has no issuing call:
    # without this the clipped index would blame the last activity, which started before it
    rows = np.where(found < len(gpu.start), api_row[pos], -1)
    return np.where(rows >= 0, trace.api.start[np.maximum(rows, 0)], -1)


def _cpu_events(trace: TraceEvents, api_row: np.ndarray) -> dict[str, np.ndarray]:
    """CPU ranges + API calls of the launching threads, sorted, with each event's parent."""
    launch_tids = np.unique(trace.api.tid[api_row[api_row >= 0]])
    r = trace.ranges
    rmask = (r.kind != RangeKind.GPU_ANNOTATION) & np.isin(r.tid, launch_tids)
    amask = np.isin(trace.api.tid, launch_tids)
    start = np.concatenate((r.start[rmask], trace.api.start[amask]))
    end = np.concatenate((r.end[rmask], trace.api.end[amask]))
    tid = np.concatenate((r.tid[rmask], trace.api.tid[amask]))
    name = np.concatenate((r.name[rmask], trace.api.name[amask]))
    label = np.concatenate((r.kind[rmask], np.full(int(amask.sum()), _API, dtype=np.int8)))
    order = np.lexsort((-end, start, tid))
    events = {"start": start[order], "end": end[order], "tid": tid[order],
              "name": name[order], "label": label[order]}
    events["parent"], events["self_end"] = _parents(events["start"], events["end"],
                                                    events["tid"])
    return events


def _parents(start: np.ndarray, end: np.ndarray,
             tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the innermost enclosing event on the same thread (-1 for roots), and each
    event's end clipped to its parent's (clipped) end, so that children nest properly.

    Events are sorted by (thread, start, -end); a stack walk is the one loop in the analyses,
    O(n), and only over the launching threads' CPU events.
    """
    parent = np.full(len(start), -1, dtype=np.int64)
    stack: list[int] = []
    current_tid = None
    s_list, e_list, t_list = start.tolist(), end.tolist(), tid.tolist()
    clipped = list(e_list)
    for i in range(len(s_list)):
        if t_list[i] != current_tid:
            stack.clear()
            current_tid = t_list[i]
        while stack and e_list[stack[-1]] <= s_list[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
            clipped[i] = max(s_list[i], min(e_list[i], clipped[stack[-1]]))
        stack.append(i)
    return parent, np.asarray(clipped, dtype=np.int64).reshape(end.shape)


def _self_overlap(cpu: dict[str, np.ndarray], xs: np.ndarray, xe: np.ndarray) -> np.ndarray:
    """Per CPU event: time inside the intervals (xs, xe) not covered by its children."""
    overlap = iv.overlap_with(cpu["start"], cpu["self_end"], xs, xe)
    has_parent = cpu["parent"] >= 0
    children = np.bincount(cpu["parent"][has_parent], weights=overlap[has_parent],
                           minlength=len(overlap))
    return overlap - children.astype(np.int64)


def _label(code: int) -> str:
    return "runtime" if code == _API else _RANGE_LABEL.get(RangeKind(code), "cpu")


def _top_by_name(trace: TraceEvents, cpu: dict[str, np.ndarray], self_time: np.ndarray,
                 top_n: int) -> list[tuple[str, str, int]]:
    totals = np.bincount(cpu["name"], weights=self_time, minlength=len(trace.names))
    label_of = dict(zip(cpu["name"].tolist(), cpu["label"].tolist()))
    order = [i for i in np.argsort(-totals, kind="stable")[:top_n] if totals[i] > 0]
    return [(trace.names[i], _label(label_of[i]), int(totals[i])) for i in order]


def _describe_gap(trace: TraceEvents, cpu: dict[str, np.ndarray], g0: int, g1: int,
                  issue_start: int) -> Gap:
    self_time = _self_overlap(cpu, np.array([g0]), np.array([g1]))
    top = _top_by_name(trace, cpu, self_time, 3)
    return Gap(start_ns=g0, length_ns=g1 - g0,
               next_issued_after_gap_start_ns=(issue_start - g0) if issue_start >= 0 else None,
               cpu_top=[CpuEvent(name=n, kind=k, self_ns=v) for n, k, v in top])


def _cpu_during(trace: TraceEvents, cpu: dict[str, np.ndarray], gs: np.ndarray,
                ge: np.ndarray, top_n: int = 8) -> CpuDuringIdle:
    idle = int((ge - gs).sum())
    covered = iv.union(cpu["start"], cpu["end"])
    covered_idle = int(iv.overlap_with(*covered, gs, ge).sum()) if len(gs) else 0
    self_time = _self_overlap(cpu, gs, ge)
    by_kind = np.bincount(cpu["label"].astype(np.int64), weights=self_time, minlength=_API + 1)
    threads = max(1, len(np.unique(cpu["tid"])))

    def share(value: float) -> float:
        return float(value / (idle * threads)) if idle else 0.0

    return CpuDuringIdle(
        idle_ns=idle,
        launching_threads=threads,
        cpu_recorded_ns=covered_idle,
        cpu_recorded_share=share(covered_idle),
        self_time_by_kind=[KindTime(kind=_label(k), self_ns=int(by_kind[k]),
                                    share_of_idle=share(by_kind[k]))
                           for k in np.argsort(-by_kind) if by_kind[k] > 0],
        top_events=[IdleEvent(name=n, kind=k, self_ns=v, share_of_idle=share(v))
                    for n, k, v in _top_by_name(trace, cpu, self_time, top_n)],
    )


def launch_delay(trace: TraceEvents, gpu: Table, api_row: np.ndarray) -> LaunchDelay:
    has = api_row >= 0
    if not has.any():
        return LaunchDelay(count=0, graph_launched=0)
    graph_name = name_flags(trace, GRAPH_LAUNCH)
    rows = api_row[has]
    from_graph = graph_name[trace.api.name[rows]]
    corr = gpu.corr[has]
    # keep every direct launch, and only the first activity of each graph launch
    first_of_corr = np.zeros(len(rows), dtype=bool)
    _, first_idx = np.unique(corr, return_index=True)
    first_of_corr[first_idx] = True
    keep = ~from_graph | first_of_corr
    delay = (gpu.start[has] - trace.api.end[rows])[keep]
    if len(delay) == 0:
        return LaunchDelay(count=0, graph_launched=int(from_graph.sum()))
    return LaunchDelay(count=int(len(delay)), graph_launched=int(from_graph.sum()),
                       median_ns=float(np.median(delay)), p90_ns=float(np.percentile(delay, 90)),
                       max_ns=int(delay.max()), negative_count=int((delay < 0).sum()))
