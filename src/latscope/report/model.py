"""report.json as a typed model (msgspec Structs): what ``campaign.document.build_report``
produces and docs/report.md describes; ``Report.to_dict()`` is the JSON's dict, key for key in
field order, and ``report_schema()`` the JSON Schema generated from the model.

The verdict, each finding with its evidence, the stages, the client's reliability, the
experiments (A/B proofs, with their guards) and the proposals are the producers' own Structs
(``latscope.results``, in the ground: the findings engine makes them). Open-ended leaves,
documented where they are: the target (server_args, log: whatever was known
about the server), a finding's impact (``findings.impact``: target, share and what measured it),
an A/B's reruns. The GPU series are the telemetry layer's
``TelemetrySeries``. ``load_report``
checks a report.json dict against the model (types included) and gives it back typed.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from latscope.results import (  # noqa: F401 -- the report's sections, re-exported
    ABResult,
    ClientSection,
    EvidenceItem,
    FindingEntry,
    Guard,
    Number,
    Proposal,
    Stage,
    Verdict,
    _plain,
    section,
)
from latscope.telemetry.series import TelemetrySeries

SCHEMA_VERSION = 1  # report.json's; report.schema checks a file's against it
Experiment = ABResult  # report.json's name for an A/B proof


class SweepPoint(msgspec.Struct):
    load: Number
    throughput_rps: float | None
    output_tok_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    itl_p50_ms: float | None
    errors: int | None
    prefix_cache_hit_rate: float | None
    warm: bool
    run_dir: str | None


class Knee(msgspec.Struct):
    load: Number
    confidence: str | None


class Recommended(msgspec.Struct):
    load: Number
    why: str


class Sweep(msgspec.Struct):
    load_kind: str  # "concurrency"
    points: list[SweepPoint]
    knee: Knee | None
    recommended: Recommended | None
    cut: str  # why the sweep stopped early ("" when it did not)


class ComponentRow(msgspec.Struct):
    key: str  # "ttft.server.queue"
    label: str
    parent: str | None
    mean_ms: float | None
    share: float | None  # of client TTFT or E2E, 0-1
    source: str
    note: str


class DecompositionView(msgspec.Struct):
    label: str  # the named load: "light", "knee", ...
    load: Number
    components: list[ComponentRow]
    server_source: str
    notes: list[str]
    client_reliable: bool | None


class TimeSeries(msgspec.Struct):
    t_s: list[float]
    running: list[float | None]
    waiting: list[float | None]
    kv_usage: list[float | None]
    preemptions: list[float | None]
    client_in_flight: list[Number]
    load_level: list[Number]


class KernelCategory(msgspec.Struct):
    name: str | None
    ms: float | None
    share: float | None


class TopKernel(msgspec.Struct):
    name: str | None
    ms: float | None
    count: int | None
    share: float | None
    category: str | None


class TraceSection(msgspec.Struct):
    source: str | None
    device: Any
    window_ms: float | None
    breakdown: dict[str, float | None]  # compute, exposed_comm, exposed_copy, idle
    categories: list[KernelCategory]
    top_kernels: list[TopKernel]


class RankRef(msgspec.Struct):
    rank: Any
    file: str
    device: Any


class CollectiveKind(msgspec.Struct):
    """A rank's collectives of one kind (all-reduce, all-gather ...): count, time, waiting."""

    kind: str
    count: int
    total_ms: float | None
    wait_ms: float | None


class RankRow(msgspec.Struct):
    rank: Any
    file: str
    device: Any
    window_ms: float | None
    busy_ms: float | None
    idle_share: float | None
    comm_share: float | None
    exposed_comm_share: float | None
    collective_ms: float | None
    wait_ms: float | None
    wait_share: float | None
    kinds: list[CollectiveKind]


class CrossRank(msgspec.Struct):
    ranks: list[RankRow]
    slowest: RankRef | None
    slowest_busy_ms: float | None
    straggler: RankRef | None
    matched: int
    skew_p50_ms: float | None
    skew_p99_ms: float | None
    skew_max_ms: float | None
    notes: list[str]
    errors: list[str]


class LatencyRow(msgspec.Struct):
    """One latency over a passive window: the exact mean and p50 / p99 as ``{value, lower,
    upper}`` in ms (inside their bucket, or exact from spans: lower = upper = value)."""

    name: str  # ttft | queue | prefill | decode | e2e | itl | tpot
    count: Number
    mean_ms: float | None
    p50: dict[str, float | None] | None
    p99: dict[str, float | None] | None
    source: str


class WindowPoint(msgspec.Struct, kw_only=True):
    """One scrape interval of a passive window (``analysis.window.Interval``), at its end."""

    t_s: float
    finished_rps: float | None
    arrivals_rps: float | None
    running: float | None  # gauges at the interval's closing scrape
    waiting: float | None
    kv_usage: float | None  # 0-1
    ttft_mean_ms: float | None  # requests whose first token came in the interval
    ttft_p50_ms: float | None = None  # inside its bucket (absent from the first recordings)
    ttft_p99_ms: float | None
    queue_share: float | None  # the interval's mean queue time / its mean TTFT
    preemptions: float | None
    spike: bool


class SpikeRow(msgspec.Struct):
    start_s: float
    end_s: float
    ttft_mean_ms: float
    ttft_p99: dict[str, float | None] | None
    queue_share: float | None
    waiting_max: float | None
    kv_max: float | None
    preemptions: float
    binding: list[str]


class WindowSection(msgspec.Struct, kw_only=True):
    """A passive run's window (``diagnose --passive``, ``watch``): no load was sent; what the
    server did with its own traffic (``campaign.passive_report``)."""

    label: str  # "the last 30 s of live traffic"
    started: str  # UTC ISO 8601 of the first scrape
    seconds: float
    scrapes: int
    interval_s: float | None
    load_sent: bool  # always False: the run directory says no load was sent
    requests_sent: dict[str, int]  # what latscope did send: "GET /metrics": 16, ...
    traffic: dict[str, Any]  # analysis.traffic.Traffic's fields: open
    latency: list[LatencyRow]
    split: list[ComponentRow]  # the server TTFT's queue / prefill / rest, shares of it
    split_source: str
    points: list[WindowPoint]
    spikes: list[SpikeRow]
    stalls: list[dict[str, float]]
    unseen: list[str]  # what could not be seen or measured, one line each
    scrape: dict[str, Any] | None  # the scraper's status and cost (metrics/scrape.json)
    notes: list[str]


class Report(msgspec.Struct, kw_only=True):
    schema_version: int
    kind: str  # "diagnose"
    latscope_version: str
    created: str  # UTC ISO 8601
    command: Any  # the redacted command line
    target: dict[str, Any]  # url, local, controlled, same_host and what else was known: open
    verdict: Verdict | None
    findings: list[FindingEntry]  # ranked
    stages: list[Stage]
    client: ClientSection | None
    sweep: Sweep | None
    decompositions: list[DecompositionView]
    timeseries: TimeSeries | None
    trace: TraceSection | None
    cross_rank: CrossRank | None = None  # absent from report.json files before it was added
    telemetry: TelemetrySeries | None = None  # absent from older report.json
    window: WindowSection | UnsetType = UNSET  # a passive run's; absent from load runs' reports
    experiments: list[Experiment]
    proposals: list[Proposal]
    notes: list[str]
    elapsed_s: float
    run_dir: str

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _plain(self)
        return out


def report_schema() -> dict[str, Any]:
    """The JSON Schema of report.json, generated from the model."""
    schema: dict[str, Any] = msgspec.json.schema(Report)
    schema["description"] = f"latscope report.json, schema_version {SCHEMA_VERSION}"
    return schema


def load_report(data: dict[str, Any]) -> Report:
    """``data`` (a report.json's dict) as the typed model; msgspec.ValidationError names the
    first field whose type does not match."""
    return msgspec.convert(data, Report, strict=False)
