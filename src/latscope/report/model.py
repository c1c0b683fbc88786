"""report.json as a typed model (msgspec Structs): what ``campaign.document.build_report``
produces and docs/report.md describes; ``Report.to_dict()`` is the JSON's dict, key for key in
field order, and ``report_schema()`` the JSON Schema generated from the model.

Sections made elsewhere are typed as the dicts they are (the verdict by ``findings.verdict``,
each finding by ``Finding.to_dict``, experiments by ``campaign.experiment``, telemetry by
``telemetry.facts``); the sections built for the report are Structs. ``load_report`` checks a
report.json dict against the model (types included) and gives it back typed.
"""

from __future__ import annotations

from typing import Any

import msgspec

from latscope.report.schema import SCHEMA_VERSION


class SweepPoint(msgspec.Struct):
    load: float
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
    load: float
    confidence: str | None


class Recommended(msgspec.Struct):
    load: float
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
    load: float
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
    client_in_flight: list[float]
    load_level: list[float]


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
    kinds: list[dict[str, Any]]


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


class Report(msgspec.Struct):
    schema_version: int
    kind: str  # "diagnose"
    latscope_version: str
    created: str  # UTC ISO 8601
    command: Any  # the redacted command line
    target: dict[str, Any]
    verdict: dict[str, Any] | None
    findings: list[dict[str, Any]]  # ranked, Finding.to_dict()
    stages: list[dict[str, Any]]
    client: dict[str, Any] | None
    sweep: Sweep | None
    decompositions: list[DecompositionView]
    timeseries: TimeSeries | None
    trace: TraceSection | None
    cross_rank: CrossRank | None
    telemetry: Any
    experiments: list[dict[str, Any]]
    proposals: list[dict[str, Any]]
    notes: list[str]
    elapsed_s: float
    run_dir: str

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _plain(self)
        return out


def _plain(value: Any) -> Any:
    """Structs as dicts in field order, recursively; every other value left as it is (the JSON
    writer encodes those, as it always did)."""
    if isinstance(value, msgspec.Struct):
        return {name: _plain(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def report_schema() -> dict[str, Any]:
    """The JSON Schema of report.json, generated from the model."""
    schema: dict[str, Any] = msgspec.json.schema(Report)
    schema["description"] = f"latscope report.json, schema_version {SCHEMA_VERSION}"
    return schema


def load_report(data: dict[str, Any]) -> Report:
    """``data`` (a report.json's dict) as the typed model; msgspec.ValidationError names the
    first field whose type does not match."""
    return msgspec.convert(data, Report, strict=False)
