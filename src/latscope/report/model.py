"""report.json as a typed model (msgspec Structs): what ``campaign.document.build_report``
produces and docs/report.md describes; ``Report.to_dict()`` is the JSON's dict, key for key in
field order, and ``report_schema()`` the JSON Schema generated from the model.

The verdict (``findings.verdict``), each finding with its evidence (``Finding.to_dict``), the
stages, the client's reliability (``campaign.observe.client_reliability``), the experiments and
the proposals are Structs too, converted from the dicts their producers make (``section``, in
``campaign.document``): a key a producer adds that the model lacks is refused there, never
dropped from report.json. A key only some verdicts (or older report.json files) have is
``UNSET`` when absent and left out of the dict, so ``to_dict`` gives back the keys it was given,
in field order.

The experiments (A/B proofs, with their guards) are Structs too, one for both producers
(``campaign.experiment``, and ``campaign.priority``'s four keys more as UNSET-able fields).
Open-ended leaves, documented where they are: the target (server_args, log: whatever was known
about the server), a finding's impact (``findings.impact``: target, share and what measured it),
an A/B's reruns, telemetry (``telemetry.facts``) and a rank's collective ``kinds``. ``load_report``
checks a report.json dict against the model (types included) and gives it back typed.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

SCHEMA_VERSION = 1  # report.json's; report.schema checks a file's against it
T = TypeVar("T")
# a number as its producer wrote it: an int stays an int (64, not 64.0, in report.json)
Number = int | float


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A section converted from a producer's dict: an unknown key is an error, not lost."""


class Verdict(_Section, kw_only=True):
    """``findings.verdict``: a cause or symptom (with its share), capacity, healthy or none."""

    text: str
    kind: str | UnsetType = UNSET  # cause | symptom | capacity | healthy | none (absent: older)
    finding_id: str | None
    healthy: bool
    severity: str | UnsetType = UNSET
    share: Number | None | UnsetType = UNSET
    target: str | None | UnsetType = UNSET
    measured_at: str | None | UnsetType = UNSET
    impact: str | None | UnsetType = UNSET  # the impact in words
    host_busy: bool | UnsetType = UNSET  # named before the verdict: the host was busy
    # named before the verdict: the prefix cache served prompts the server had seen
    prompts_resent: bool | UnsetType = UNSET

    def measured(self) -> dict[str, Any]:
        """Its share, target and load, as ``findings.impact.describe`` reads an impact."""
        return {k: v for k in ("target", "share", "measured_at")
                if not isinstance(v := getattr(self, k), UnsetType)}


class EvidenceItem(_Section):
    name: str
    value: Any  # a number, a string, a bool: whatever was read
    unit: str
    source: str


class FindingEntry(_Section):
    """One ranked finding as the report holds it (``Finding.to_dict``)."""

    id: str
    severity: str  # model.Severity's value
    title: str
    evidence: list[EvidenceItem]
    why: str
    fix: str
    reference: str
    layer: str
    # target, share, measured_at and (some) value_ms, by, explains: findings.impact's, open
    impact: dict[str, Any] | None
    role: str


class Stage(_Section):
    name: str
    status: str  # ok | failed | skipped | cut | interrupted
    seconds: Number
    note: str


class ClientSection(_Section, kw_only=True):
    """Whether the client's own timing was reliable at the load it was judged at, and why
    (``campaign.conclude``). Every key is absent (``{}``) where no load was measured, and
    off_cpu_share in report.json files older than it."""

    reliable: bool | UnsetType = UNSET
    why: str | UnsetType = UNSET
    off_cpu_share: Number | None | UnsetType = UNSET
    loop_lag_p99_ms: Number | None | UnsetType = UNSET
    loop_lag_mean_ms: Number | None | UnsetType = UNSET
    send_lag_p99_ms: Number | None | UnsetType = UNSET
    cpu_utilization: Number | None | UnsetType = UNSET
    cpu_per_token_us: Number | None | UnsetType = UNSET
    fix: str | UnsetType = UNSET
    load: Number | None | UnsetType = UNSET
    same_host: bool | None | UnsetType = UNSET


class Proposal(_Section):
    """A fix not measured here, with the command that would measure it."""

    finding_id: str
    change: str
    why: str
    note: str
    command: str


class Guard(_Section):
    """A metric an A/B's fix must not make much worse, measured on the same runs."""

    metric: str
    a_values: list[Number | None]
    b_values: list[Number | None]
    change_pct: Number | None
    ci95_pct: list[Number] | None
    verdict: str | None


class Experiment(_Section, kw_only=True):
    """One A/B proof (``campaign.experiment.Experiment.to_dict``; ``campaign.priority`` adds
    measured, server_policy, outcome and proposal). Keys absent from older report.json files,
    or written by only one producer, are ``UNSET`` when absent."""

    finding_id: str
    change: str
    metric: str
    load: Number
    arms: list[str]
    a_values: list[Number | None]
    b_values: list[Number | None]
    a_mean: Number | None
    b_mean: Number | None
    change_pct: Number | None
    ci95_pct: list[Number] | None
    helped: bool
    verdict: str | None
    warmup_excluded: bool
    prefix_cache_hit_rate: dict[str, list[Number | None]]  # one rate a run, per arm
    run_dirs: list[str]
    reruns: list[dict[str, Any]] | UnsetType = UNSET  # {run, why}: measured again
    client_unreliable_runs: list[str] | UnsetType = UNSET
    note: str
    guard: Guard | UnsetType = UNSET
    guards: list[Guard] | UnsetType = UNSET
    measured: bool | UnsetType = UNSET
    server_policy: dict[str, str] | UnsetType = UNSET
    outcome: str | UnsetType = UNSET
    proposal: str | UnsetType = UNSET

    def to_dict(self) -> dict[str, Any]:
        """As report.json holds it (what ``analysis.tune.outcome`` reads)."""
        out: dict[str, Any] = _plain(self)
        return out


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
    telemetry: Any = None  # telemetry.facts' section, open (absent from older report.json)
    window: WindowSection | UnsetType = UNSET  # a passive run's; absent from load runs' reports
    experiments: list[Experiment]
    proposals: list[Proposal]
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
        return {name: _plain(v) for name in value.__struct_fields__
                if (v := getattr(value, name)) is not UNSET}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def section(data: Any, kind: type[T]) -> T:
    """A producer's dict as its Struct; an unknown or missing key raises (a model to update)."""
    return msgspec.convert(data, kind, strict=False)


def report_schema() -> dict[str, Any]:
    """The JSON Schema of report.json, generated from the model."""
    schema: dict[str, Any] = msgspec.json.schema(Report)
    schema["description"] = f"latscope report.json, schema_version {SCHEMA_VERSION}"
    return schema


def load_report(data: dict[str, Any]) -> Report:
    """``data`` (a report.json's dict) as the typed model; msgspec.ValidationError names the
    first field whose type does not match."""
    return msgspec.convert(data, Report, strict=False)
