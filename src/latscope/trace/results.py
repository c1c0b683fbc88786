"""The trace analysis as typed results: what ``analyze_trace`` produces per device, the
cross-rank view of several traces (``parallel.cross_rank``) and the diff of two
(``compare.compare_results``). Durations are ns (``*_ns``) here; ``trace.json`` holds them in ms
(``trace.files``). Field order is the file's key order; a key only some results have (a launch
delay with no launch, a view with no collectives) is ``UNSET`` and absent from the file.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

# a duration as the analysis computed it: integer ns, or a float where it is a mean or was read
# back from ms
Ns = int | float


class _Result(msgspec.Struct, kw_only=True):
    pass


class EventCounts(_Result):
    gpu: int
    api: int
    ranges: int


class TraceSource(_Result):
    path: str
    format: str
    vendor: str
    rank: int | None
    notes: list[str]
    skipped: dict[str, int]  # events that cannot be real, by reason
    events: EventCounts


class WindowInfo(_Result):
    start_ns: Ns
    length_ns: Ns
    method: str  # "auto" | "steps:<source>" | "explicit", with what was trimmed
    steps: int


class Breakdown(_Result):
    """The window by interval union: the four parts add up to it, their shares to 1."""

    window_ns: Ns
    busy_ns: Ns
    communication_ns: Ns
    compute_ns: Ns
    exposed_comm_ns: Ns
    exposed_copy_ns: Ns
    idle_ns: Ns
    compute_share: float
    exposed_comm_share: float
    exposed_copy_share: float
    idle_share: float


class ShortKernels(_Result):
    threshold_ns: Ns
    count: int
    time_ns: Ns


class TopKernel(_Result):
    name: str
    category: str
    count: int
    total_ns: Ns
    mean_ns: float
    union_ns: Ns
    share_of_busy: float
    share_of_kernel_time: float
    generic: str | None  # the fallback rule it matched


class CategoryTime(_Result):
    category: str
    count: int
    sum_ns: Ns
    union_ns: Ns
    share_of_busy: float


class FallbackKernels(_Result):
    rule: str
    why: str
    count: int
    sum_ns: Ns
    share_of_kernel_time: float
    share_of_busy: float
    examples: list[str]


class FamilyTime(_Result):
    family: str
    category: str
    count: int
    sum_ns: Ns


class KernelTables(_Result):
    kernel_count: int
    kernel_time_sum_ns: Ns
    distinct_kernels: int
    short_kernels: ShortKernels
    top: list[TopKernel]
    categories: list[CategoryTime]
    fallbacks: list[FallbackKernels]
    families: list[FamilyTime]


class CopyDirection(_Result):
    direction: str
    count: int
    bytes: int | None
    time_ns: Ns
    gbps: float | None
    small_count: int
    pageable_count: int
    pageable_time_ns: Ns
    pageable_gbps: float | None
    pinned_count: int
    pinned_gbps: float | None
    blocking_count: int
    blocking_time_ns: Ns


class CopyStats(_Result):
    by_direction: list[CopyDirection]
    memset_count: int
    copy_union_ns: Ns
    not_overlapped_by_compute_ns: Ns
    small_copy_bytes: int
    host_memory_method: str


class GapBucket(_Result):
    bucket: str
    count: int
    time_ns: Ns


class GapCauses(_Result):
    host_wait_ns: Ns
    queued_ns: Ns
    unknown_ns: Ns


class CpuEvent(_Result):
    name: str
    kind: str
    self_ns: Ns


class Gap(_Result):
    start_ns: Ns
    length_ns: Ns
    next_issued_after_gap_start_ns: Ns | None
    cpu_top: list[CpuEvent]


class KindTime(_Result):
    kind: str
    self_ns: Ns
    share_of_idle: float


class IdleEvent(_Result):
    name: str
    kind: str
    self_ns: Ns
    share_of_idle: float


class CpuDuringIdle(_Result):
    idle_ns: Ns
    launching_threads: int
    cpu_recorded_ns: Ns
    cpu_recorded_share: float
    self_time_by_kind: list[KindTime]
    top_events: list[IdleEvent]


class LaunchDelay(_Result):
    count: int
    graph_launched: int
    median_ns: float | UnsetType = UNSET
    p90_ns: float | UnsetType = UNSET
    max_ns: Ns | UnsetType = UNSET
    negative_count: int | UnsetType = UNSET


class GapAnalysis(_Result):
    count: int
    idle_ns: Ns
    distribution: list[GapBucket]
    by_cause: GapCauses
    largest: list[Gap]
    cpu_during_idle: CpuDuringIdle
    launch_delay: LaunchDelay


class QueueClamp(_Result):
    applied: bool
    activities_clamped: int
    overlap_removed_ns: Ns
    overlapping_pairs: int


class DeviceAnalysis(_Result):
    device: int
    device_name: str
    activities: int
    window: WindowInfo
    breakdown: Breakdown
    kernels: KernelTables
    copies: CopyStats
    gaps: GapAnalysis
    queue_clamp: QueueClamp


class TraceAnalysis(_Result):
    """One trace: where it came from and each device's analysis."""

    source: TraceSource
    devices: list[DeviceAnalysis]


# --- several traces: the cross-rank view ------------------------------------------------------

class RankSummary(_Result):
    """One (file, device) of several traces side by side."""

    path: str
    rank: int | None
    device: int
    window_ns: Ns
    busy_ns: Ns
    idle_share: float
    comm_share: float
    exposed_comm_share: float


class WorkerInfo(_Result):
    """What analysing one trace cost, and why it failed if it did."""

    path: str
    pid: int
    host: str
    wall_s: float
    peak_rss_mb: float
    error: str | None


class RankRef(_Result):
    path: str
    device: int
    rank: int | None


class SlowestRank(_Result):
    path: str
    rank: int | None
    device: int
    compute_busy_ns: Ns
    by: str


class KindWait(_Result):
    kind: str
    count: int
    total_ns: Ns
    wait_ns: Ns


class RankWait(_Result):
    path: str
    device: int
    rank: int | None
    collective_ns: Ns
    wait_ns: Ns
    wait_share: float | None
    by_kind: list[KindWait]


class CollectiveSkew(_Result, kw_only=True):
    """The k-th collective of every rank matched; without a match only ``matched`` (0) and
    the notes."""

    matched: int
    skew_p50_ns: float | UnsetType = UNSET
    skew_p99_ns: float | UnsetType = UNSET
    skew_max_ns: Ns | UnsetType = UNSET
    per_rank: list[RankWait] | UnsetType = UNSET
    straggler: RankRef | UnsetType = UNSET
    notes: list[str]


class CrossRankView(_Result):
    ranks: list[RankSummary]
    workers: list[WorkerInfo]
    slowest_rank: SlowestRank | UnsetType = UNSET
    collectives: CollectiveSkew | UnsetType = UNSET


# --- two traces: the diff ----------------------------------------------------------------------

class Side(_Result):
    path: str
    device: int
    name: str


class DiffRow(_Result):
    key: str
    a_ns: Ns
    b_ns: Ns
    delta_ns: Ns
    ratio: float | None


class MatchRow(DiffRow):
    count_a: int
    count_b: int
    category: str


class CountDiff(_Result):
    key: str
    a: int
    b: int
    delta: int
    ratio: float | None


class Comparison(_Result):
    a: Side
    b: Side
    breakdown: list[DiffRow]
    categories: list[MatchRow]
    families: list[MatchRow]
    kernel_count: CountDiff
