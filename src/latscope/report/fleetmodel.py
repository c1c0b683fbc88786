"""report.json of a fleet diagnosis (``kind: "fleet"``) as a typed model: the verdict and the
fleet's findings in the forms every report has (``report.model``), a row per replica, the
router's part when measured, Prometheus' figures beside latscope's, and the time series with
one line per replica. ``FleetReport.to_dict()`` is the JSON's dict in field order."""

from __future__ import annotations

from typing import Any

import msgspec

from latscope.report.model import FindingEntry, Number, Verdict, _plain

FLEET_SCHEMA_VERSION = 1


class ReplicaRow(msgspec.Struct, kw_only=True):
    name: str
    labels: dict[str, str]
    status: str  # "up" | "restarted" | "gone" (fleet.replica_gone says when) | "no vllm series"
    verdict: str  # its own diagnosis's verdict, one line
    verdict_finding: str | None
    requests: Number | None  # finished in the window
    rate_per_s: Number | None
    ttft_mean_ms: Number | None
    ttft_ci_ms: list[Number] | None  # 95% interval of the mean
    ttft_p50_ms: Number | None
    ttft_p99_ms: Number | None
    ttft_p99_bucket_ms: list[Number | None] | None  # the bucket the p99 lies in
    queue_mean_ms: Number | None
    queue_share: Number | None  # of its own TTFT
    prefill_mean_ms: Number | None
    itl_mean_ms: Number | None
    itl_ci_ms: list[Number] | None
    e2e_mean_ms: Number | None
    mean_running: Number | None  # Little's law over the window
    mean_waiting: Number | None
    running_peak: Number | None
    waiting_peak: Number | None
    kv_mean: Number | None
    kv_peak: Number | None
    preemptions: Number | None
    stall_s: Number
    findings: list[FindingEntry]  # its own diagnosis's acting findings, ranked


class RouterRow(msgspec.Struct, kw_only=True):
    source: str
    front_ttft_ms: Number
    front_count: int
    send_lag_ms: Number
    replica_ttft_ms: Number
    replica_count: Number
    router_ms: Number | None  # None: the parts disagree (refused, see note)
    share: Number | None
    note: str
    reliable: bool
    why_unreliable: str
    hop_ms: Number | None  # the balancer's own hop (GET /health through it less straight)
    front_rtt_ms: Number | None
    direct_rtt_ms: Number | None


class PromqlCheck(msgspec.Struct, kw_only=True):
    """One figure as Prometheus computed it and as latscope did, over the same window."""

    replica: str
    metric: str  # ttft | queue | itl
    what: str  # count | mean | p50 | p99
    promql: Number | None
    latscope: Number | None
    agree: bool | None
    note: str


class ReplicaSeries(msgspec.Struct, kw_only=True):
    """One replica's line in the fleet's time series (t_s after the window's start)."""

    name: str
    t_s: list[Number]
    requests_per_s: list[Number | None]
    ttft_mean_ms: list[Number | None]
    queue_mean_ms: list[Number | None]
    running: list[Number | None]
    waiting: list[Number | None]
    kv_usage: list[Number | None]


class FleetSource(msgspec.Struct, kw_only=True):
    kind: str  # "prometheus" | "active"
    prometheus: str | None  # URL as shown (password redacted)
    selector: str
    replica_labels: list[str]
    balancer: str | None
    start: str  # UTC ISO 8601
    end: str
    window_s: Number
    step_s: Number
    scrape_interval_s: Number | None


class FleetReport(msgspec.Struct, kw_only=True):
    schema_version: int
    kind: str  # "fleet"
    latscope_version: str
    created: str
    command: Any
    source: FleetSource
    verdict: Verdict
    findings: list[FindingEntry]
    replicas: list[ReplicaRow]
    router: RouterRow | None
    promql: list[PromqlCheck]
    timeseries: list[ReplicaSeries]
    notes: list[str]
    elapsed_s: Number
    run_dir: str

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _plain(self)
        return out


def load_fleet_report(data: dict[str, Any]) -> FleetReport:
    """A fleet report.json's dict as the model (msgspec.ValidationError names the field)."""
    return msgspec.convert(data, FleetReport, strict=False)
