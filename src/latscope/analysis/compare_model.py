"""``latscope compare``'s result as a typed model (msgspec Structs): what ``campaign.compare``
returns, ``compare.json`` holds, and every renderer (terminal, markdown, HTML) reads.

Changes are fractions (0.12 is +12%); an error rate's change is a difference of shares (0.01 is
one point). An interval is ``[lo, hi]`` at 95%; ``interval`` says which one a verdict used.
"""

from __future__ import annotations

from typing import Any

import msgspec

from latscope.trace.files import as_json, from_json
from latscope.trace.results import Comparison as TraceDiff

SCHEMA_VERSION = 1
VERDICTS = ("regression", "improvement", "no change", "inconclusive")
EXIT_OK, EXIT_REGRESSION, EXIT_UNDECIDED = 0, 1, 2


class _Struct(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class MetricRow(_Struct, kw_only=True):
    """One figure on both sides, its change, intervals and verdict."""

    metric: str  # "ttft_p99"
    label: str  # "TTFT p99"
    unit: str
    higher_is_better: bool
    relative: bool  # False: a share, ``change`` in points (fractions)
    base: float | None
    new: float | None
    change: float | None
    within: list[float] | None  # per-request block bootstrap, requests of a side pooled
    between: list[float] | None  # Welch t over the runs' figures (2+ runs a side)
    interval: str  # "within-run" | "between-run" | "none": the one the verdict used
    tolerance: float  # a change inside +-tolerance is "no change"
    verdict: str  # one of VERDICTS
    gate: str  # "fail" | "pass" | "undecided" | "" (not in the policy)
    why: str = ""  # what kept it inconclusive (too short, no interval)
    n_base: int = 0
    n_new: int = 0
    note: str = ""


class Difference(_Struct, kw_only=True):
    """A fact that differs between the runs (or is not recorded on one side)."""

    key: str  # "workload.input_len"
    label: str
    group: str  # workload | load | model | hardware | client | cache | server | run
    base: str
    new: str
    action: str  # "refuse" | "caveat" | "list"
    why: str = ""


class LayerRow(_Struct, kw_only=True):
    """A component of the TTFT or E2E decomposition on both sides (means, ms)."""

    key: str
    label: str
    total: str  # "ttft" | "e2e": the figure it is part of
    base_ms: float | None
    new_ms: float | None
    delta_ms: float | None
    share: float | None  # of the total's change (same sign: the part that moved it)
    source: str = ""


class StateRow(_Struct, kw_only=True):
    """A server gauge or counter over the run, both sides."""

    key: str  # running_max, running_queued, waiting_max, kv_usage_max, preemptions, ...
    label: str
    base: float | None
    new: float | None
    unit: str = ""


class FindingChange(_Struct, kw_only=True):
    """A diagnose finding that appeared, disappeared or stayed, with its evidence."""

    id: str
    change: str  # "appeared" | "gone" | "kept"
    severity: str
    title: str
    evidence: list[str]
    base_title: str = ""


class Curve(_Struct, kw_only=True):
    """A series drawn for both sides on one chart (x, y pairs)."""

    chart: str  # "distribution" | "timeseries" | "sweep"
    series: str  # "TTFT", "running", "throughput"...
    side: str  # "BASE" | "NEW"
    x: list[float]
    y: list[float]


class SweepPoint(_Struct, kw_only=True):
    load: float
    base: dict[str, float | None]
    new: dict[str, float | None]


class SweepSection(_Struct, kw_only=True):
    load_kind: str
    points: list[SweepPoint]
    knee_base: float | None
    knee_new: float | None
    max_throughput_base: float | None
    max_throughput_new: float | None
    sentence: str
    metrics_at: float | None = None  # the load whose runs gave the metric rows


class DiagnoseSection(_Struct, kw_only=True):
    verdict_base: str
    verdict_new: str
    findings: list[FindingChange]


class Comparison(_Struct, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    kind: str  # the runs' kind: bench, sweep, diagnose, trace, ...
    base: list[str]
    new: list[str]
    status: str  # "regression" | "no regression" | "inconclusive" | "not comparable"
    exit_code: int
    headline: str
    reasons: list[str]  # what kept the gate from 0 or 1
    policy: list[str]
    differences: list[Difference]
    metrics: list[MetricRow]
    layers: list[LayerRow]
    layer_sentence: str
    state: list[StateRow]
    curves: list[Curve]
    sweep: SweepSection | None = None
    diagnose: DiagnoseSection | None = None
    # latscope.trace.compare.compare_results: ns in memory, ms in compare.json (as trace.json)
    trace: TraceDiff | None = None
    notes: list[str]
    findings: list[dict[str, Any]]  # Finding.to_dict of the comparison's findings

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = msgspec.to_builtins(self)
        if self.trace is not None:
            data["trace"] = as_json(self.trace)
        return data


def load_comparison(data: Any) -> Comparison:
    """compare.json's dict as the typed model; a ValueError names what does not fit."""
    trace = data.get("trace") if isinstance(data, dict) else None
    try:
        comparison = msgspec.convert({**data, "trace": None} if trace is not None else data,
                                     Comparison)
        if trace is not None:
            comparison.trace = from_json(trace, TraceDiff)
    except msgspec.ValidationError as exc:
        raise ValueError(f"not a comparison latscope wrote ({exc})") from None
    return comparison
