"""report.json from a ``Diagnosis``: the verdict, the ranked findings, the stages, the sweep's
curve, the TTFT split at each named load, the server's time series, the trace's breakdown, the
experiments and proposals, built as the typed model ``latscope.report.model.Report``. The
renderers (``latscope.report``) take this document."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from msgspec import UnsetType

from latscope.campaign.state import Diagnosis, level_label
from latscope.report.model import (
    SCHEMA_VERSION,
    CollectiveKind,
    ComponentRow,
    CrossRank,
    DecompositionView,
    FindingEntry,
    KernelCategory,
    Knee,
    RankRef,
    RankRow,
    Recommended,
    Report,
    Stage,
    Sweep,
    SweepPoint,
    TimeSeries,
    TopKernel,
    TraceSection,
    section,
)
from latscope.telemetry.series import telemetry_section
from latscope.trace.files import StoredTrace
from latscope.trace.results import (
    CollectiveSkew,
    CrossRankView,
    RankWait,
    SlowestRank,
)
from latscope.trace.results import RankRef as TraceRankRef


def build_report(state: Diagnosis) -> dict[str, Any]:
    """report.json's dict (``report_model(state).to_dict()``), checked against the model once
    (types included): raises ``msgspec.ValidationError`` when a section does not fit it (a
    producer that handed over something else than its typed result: a bug to fix there)."""
    import msgspec

    from latscope.report.model import Report

    report = report_model(state).to_dict()
    msgspec.convert(report, Report, strict=False)
    return report


def unmodelled_report(state: Diagnosis, cause: str) -> dict[str, Any]:
    """report.json when the model refused a section: every section as its producer gave it and
    the cause (``report_error``), so a model bug loses nothing a run gathered. Not rendered:
    the renderers read the typed model."""
    from latscope import __version__

    return {"schema_version": SCHEMA_VERSION, "kind": "diagnose", "latscope_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": state.run.manifest.get("command", ""), "report_error": cause,
            "target": {**state.target, "same_host": state.same_host},
            "verdict": _as_produced(state.verdict),
            "findings": [f.to_dict() for f in state.ranked],
            "stages": [dataclasses.asdict(s) for s in state.stages],
            "client": _as_produced(state.client),
            "experiments": [_as_produced(e) for e in state.experiments],
            "proposals": [_as_produced(p) for p in state.proposals],
            "notes": state.notes, "elapsed_s": round(time.monotonic() - state.started, 1),
            "run_dir": str(state.run.path)}


def _as_produced(section: Any) -> Any:
    """A section's dict, whatever its producer handed over (the report that lost nothing)."""
    return section.to_dict() if hasattr(section, "to_dict") else section


def report_model(state: Diagnosis) -> Report:
    from latscope import __version__

    return Report(
        schema_version=SCHEMA_VERSION, kind="diagnose", latscope_version=__version__,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        command=state.run.manifest.get("command", ""),
        target={**state.target, "same_host": state.same_host},
        verdict=state.verdict,
        findings=[section(f.to_dict(), FindingEntry) for f in state.ranked],
        stages=[section(dataclasses.asdict(s), Stage) for s in state.stages],
        client=state.client,
        sweep=_sweep_section(state),
        decompositions=_decomposition_section(state),
        timeseries=_timeseries_section(state),
        trace=_trace_section(state.trace),
        cross_rank=cross_rank_section(state.trace.cross_rank if state.trace else None),
        telemetry=telemetry_section([o.run_dir for _, o in sorted(state.observations.items())]),
        experiments=list(state.experiments),
        proposals=list(state.proposals),
        notes=state.notes,
        elapsed_s=round(time.monotonic() - state.started, 1),
        run_dir=str(state.run.path),
    )


def _sweep_section(state: Diagnosis) -> Sweep | None:
    if not state.steps:
        return None
    points = []
    for s in state.steps:
        m = s.metrics
        points.append(SweepPoint(
            load=s.load, throughput_rps=m.get("requests_per_s"),
            output_tok_s=m.get("output_tokens_per_s"),
            ttft_p50_ms=m.get("ttft_p50_ms"), ttft_p99_ms=m.get("ttft_p99_ms"),
            e2e_p50_ms=m.get("e2e_p50_ms"), e2e_p99_ms=m.get("e2e_p99_ms"),
            itl_p50_ms=m.get("itl_p50_ms"),
            errors=None if (failed := m.get("requests_failed")) is None else int(failed),
            prefix_cache_hit_rate=m.get("prefix_cache_hit_rate"), warm=True, run_dir=s.run_dir))
    a = state.analysis
    knee = a.knee if a else None
    cut = next((s.stop_reason for s in state.steps if s.stop_reason), "")
    return Sweep(load_kind="concurrency", points=points,
                 knee=Knee(knee.load, knee.confidence) if knee else None,
                 recommended=(Recommended(a.recommended, "10% left of the knee")
                              if a and a.recommended is not None else None),
                 cut=cut)


def _decomposition_section(state: Diagnosis) -> list[DecompositionView]:
    out = []
    for load in dict.fromkeys(state.levels.values()):
        obs = state.observations.get(load)
        if obs is None or obs.decomposition is None:
            continue
        comps = [ComponentRow(c.key, c.label, c.parent, c.mean_ms, c.share, c.source, c.note)
                 for c in obs.decomposition.components]
        out.append(DecompositionView(level_label(state, load), load, comps,
                                     obs.decomposition.server_source, obs.decomposition.notes,
                                     obs.client.reliable))
    return out


def _timeseries_section(state: Diagnosis) -> TimeSeries | None:
    from latscope.server.metrics import counter_delta, gauge_series

    snaps = [(load, s) for load, o in sorted(state.observations.items()) for s in o.snapshots]
    if not snaps:
        return None
    t0 = snaps[0][1].wall_time
    series: dict[str, list[Any]] = {k: [] for k in ("t_s", "running", "waiting", "kv_usage",
                                                    "preemptions", "client_in_flight",
                                                    "load_level")}
    first = snaps[0][1]
    for load, snap in snaps:
        one = [snap]
        series["t_s"].append(round(snap.wall_time - t0, 3))
        series["running"].append(_last(gauge_series(one, "vllm:num_requests_running", combine=sum)))
        series["waiting"].append(_last(gauge_series(one, "vllm:num_requests_waiting", combine=sum)))
        series["kv_usage"].append(_last(gauge_series(one, "vllm:kv_cache_usage_perc", combine=max)))
        pre = counter_delta(first, snap, "vllm:num_preemptions_total")
        series["preemptions"].append(pre.delta if pre else None)
        series["client_in_flight"].append(load)
        series["load_level"].append(load)
    return TimeSeries(**series)


def _last(points: list[tuple[Any, float]]) -> float | None:
    return points[-1][1] if points else None


def _trace_section(trace: StoredTrace | None) -> TraceSection | None:
    """The first device's breakdown, kernel categories and top kernels, in ms."""
    if trace is None or not trace.devices:
        return None
    dev = trace.devices[0]
    b = dev.breakdown
    shares: dict[str, float | None] = {"compute": b.compute_share,
                                       "exposed_comm": b.exposed_comm_share,
                                       "exposed_copy": b.exposed_copy_share,
                                       "idle": b.idle_share}
    cats = [KernelCategory(c.category, _ms(c.union_ns), c.share_of_busy)
            for c in dev.kernels.categories]
    top = [TopKernel(k.name, _ms(k.total_ns), k.count, k.share_of_busy, k.category)
           for k in dev.kernels.top[:15]]
    return TraceSection(trace.source.path, dev.device, _ms(b.window_ns), shares, cats, top)


def cross_rank_section(view: CrossRankView | UnsetType | None) -> CrossRank | None:
    """The cross-rank view of a profile with one trace per rank (``trace.parallel.cross_rank``),
    one row per rank: busy/idle, communication and its exposed part, collective time and the
    wait in it for other ranks, by collective kind; the slowest rank, the straggler and the
    skew. Lookups only: every number was computed by the trace package."""
    if not isinstance(view, CrossRankView) or not view.ranks:
        return None
    coll = view.collectives if isinstance(view.collectives, CollectiveSkew) else None
    waits = {(r.path, r.device): r for r in _per_rank(coll)}
    rows = []
    for r in view.ranks:
        w = waits.get((r.path, r.device))
        rows.append(RankRow(
            rank=r.rank, file=Path(r.path).name, device=r.device,
            window_ms=_ms(r.window_ns), busy_ms=_ms(r.busy_ns), idle_share=r.idle_share,
            comm_share=r.comm_share, exposed_comm_share=r.exposed_comm_share,
            collective_ms=_ms(w.collective_ns) if w else None,
            wait_ms=_ms(w.wait_ns) if w else None, wait_share=w.wait_share if w else None,
            kinds=[CollectiveKind(k.kind, k.count, _ms(k.total_ns), _ms(k.wait_ns))
                   for k in (w.by_kind if w else [])]))
    slowest = view.slowest_rank if isinstance(view.slowest_rank, SlowestRank) else None
    straggler = coll.straggler if coll and isinstance(coll.straggler, TraceRankRef) else None
    return CrossRank(
        ranks=rows, slowest=_rank_ref(slowest),
        slowest_busy_ms=_ms(slowest.compute_busy_ns) if slowest else None,
        straggler=_rank_ref(straggler), matched=coll.matched if coll else 0,
        skew_p50_ms=_ms(coll.skew_p50_ns) if coll else None,
        skew_p99_ms=_ms(coll.skew_p99_ns) if coll else None,
        skew_max_ms=_ms(coll.skew_max_ns) if coll else None,
        notes=coll.notes if coll else [],
        errors=[f"{Path(w.path).name}: {w.error}" for w in view.workers if w.error])


def _per_rank(coll: CollectiveSkew | None) -> list[RankWait]:
    return coll.per_rank if coll is not None and isinstance(coll.per_rank, list) else []


def _ms(ns: float | UnsetType) -> float | None:
    """A trace duration (ns) in the report's ms; None where the view has none."""
    return ns / 1e6 if isinstance(ns, (int, float)) else None


def _rank_ref(r: SlowestRank | TraceRankRef | None) -> RankRef | None:
    return None if r is None else RankRef(r.rank, Path(r.path).name, r.device)
