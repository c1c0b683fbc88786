"""report.json from a ``Diagnosis``: the verdict, the ranked findings, the stages, the sweep's
curve, the TTFT split at each named load, the server's time series, the trace's breakdown, the
experiments and proposals, built as the typed model ``latscope.report.model.Report``. The
renderers (``latscope.report``) take this document."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from latscope.campaign.state import Diagnosis, level_label
from latscope.report.model import (
    SCHEMA_VERSION,
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
from latscope.telemetry.facts import telemetry_section


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
        cross_rank=cross_rank_section((state.trace or {}).get("cross_rank")),
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
            itl_p50_ms=m.get("itl_p50_ms"), errors=m.get("requests_failed"),
            prefix_cache_hit_rate=m.get("prefix_cache_hit_rate"), warm=True, run_dir=s.run_dir))
    a = state.analysis
    knee = a.knee.to_dict() if a and a.knee else None
    cut = next((s.stop_reason for s in state.steps if s.stop_reason), "")
    return Sweep(load_kind="concurrency", points=points,
                 knee=Knee(knee["load"], knee.get("confidence")) if knee else None,
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


def _trace_section(trace: dict[str, Any] | None) -> TraceSection | None:
    """The first device's breakdown, kernel categories and top kernels (``trace.analyze``'s
    result after ``to_json_units``: every ``*_ns`` is ``*_ms``)."""
    if not trace or not trace.get("devices"):
        return None
    dev = trace["devices"][0]
    b = dev.get("breakdown") or {}
    kernels = dev.get("kernels") or {}
    shares = {k: b.get(f"{k}_share") for k in ("compute", "exposed_comm", "exposed_copy", "idle")}
    cats = [KernelCategory(c.get("category"), c.get("union_ms"), c.get("share_of_busy"))
            for c in kernels.get("categories", [])]
    top = [TopKernel(k.get("name"), k.get("total_ms"), k.get("count"), k.get("share_of_busy"),
                     k.get("category"))
           for k in kernels.get("top", [])[:15]]
    return TraceSection((trace.get("source") or {}).get("path"), dev.get("device"),
                        b.get("window_ms"), shares, cats, top)


def cross_rank_section(view: dict[str, Any] | None) -> CrossRank | None:
    """The cross-rank view of a profile with one trace per rank (``trace.parallel.cross_rank``
    after ``to_json_units``), one row per rank: busy/idle, communication and its exposed part,
    collective time and the wait in it for other ranks, by collective kind; the slowest rank,
    the straggler and the skew. Lookups only: every number was computed by the trace package."""
    if not view or not view.get("ranks"):
        return None
    coll = view.get("collectives") or {}
    waits = {(r["path"], r["device"]): r for r in coll.get("per_rank") or []}
    rows = []
    for r in view["ranks"]:
        w = waits.get((r["path"], r["device"])) or {}
        rows.append(RankRow(
            rank=r.get("rank"), file=Path(r["path"]).name, device=r["device"],
            window_ms=r.get("window_ms"), busy_ms=r.get("busy_ms"),
            idle_share=r.get("idle_share"), comm_share=r.get("comm_share"),
            exposed_comm_share=r.get("exposed_comm_share"),
            collective_ms=w.get("collective_ms"), wait_ms=w.get("wait_ms"),
            wait_share=w.get("wait_share"), kinds=w.get("by_kind") or []))
    return CrossRank(
        ranks=rows, slowest=_rank_ref(view.get("slowest_rank")),
        slowest_busy_ms=(view.get("slowest_rank") or {}).get("compute_busy_ms"),
        straggler=_rank_ref(coll.get("straggler")), matched=coll.get("matched", 0),
        skew_p50_ms=coll.get("skew_p50_ms"), skew_p99_ms=coll.get("skew_p99_ms"),
        skew_max_ms=coll.get("skew_max_ms"),
        notes=coll.get("notes") or [],
        errors=[f"{Path(w['path']).name}: {w['error']}" for w in view.get("workers") or []
                if w.get("error")])


def _rank_ref(r: dict[str, Any] | None) -> RankRef | None:
    return None if not r else RankRef(r.get("rank"), Path(r["path"]).name, r.get("device"))
