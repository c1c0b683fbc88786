"""report.json of a passive run: the verdict and ranked findings of its window, the stages, and
the window itself (``report.model.WindowSection``): what the traffic was, its latencies with
their error bounds, where the server's TTFT went, the time series with the spikes marked, what
latscope sent and what could not be seen."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

from msgspec import UNSET

from latscope.analysis.traffic import WindowFacts
from latscope.analysis.window import BucketedQuantile
from latscope.campaign.passive import PassiveConclusion
from latscope.campaign.state import StageRecord
from latscope.findings.traffic import HISTOGRAM_SOURCE, SPANS_SOURCE, covers
from latscope.report.model import (
    SCHEMA_VERSION,
    ComponentRow,
    FindingEntry,
    LatencyRow,
    Report,
    SpikeRow,
    Stage,
    Verdict,
    WindowPoint,
    WindowSection,
    section,
)
from latscope.rundir import RunDir
from latscope.server.scrape import ScrapeSummary

_SPLIT_LABELS = {"queue": "queue (QUEUED -> SCHEDULED)",
                 "prefill": "prefill (SCHEDULED -> first token)",
                 "other": "tokenization + IPC + output processing"}


def passive_report(run: RunDir, c: PassiveConclusion | None, *, stages: list[StageRecord],
                   scrape: ScrapeSummary | None, notes: Sequence[str], broken: str | None,
                   elapsed_s: float) -> dict[str, Any]:
    """report.json's dict; without a conclusion (``broken``: a bug), the stages and notes
    with a verdict saying why there is none."""
    from latscope import __version__
    from latscope.campaign.document import _trace_section, cross_rank_section
    from latscope.telemetry.series import telemetry_section
    from latscope.trace.files import read_stored

    verdict = c.verdict if c is not None else section(
        {"text": f"No verdict: {broken}", "kind": "none", "finding_id": None,
         "healthy": False}, Verdict)
    stored = run.read("trace.json")
    trace = read_stored(stored, str(run.file("trace.json"))) if stored else None
    window: dict[str, Any] = {}
    if c is not None:
        window["window"] = window_section(c, run.manifest.get("passive") or {}, scrape)
    return Report(
        schema_version=SCHEMA_VERSION, kind="diagnose", latscope_version=__version__,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        command=run.manifest.get("command", ""),
        target={**(run.manifest.get("target") or {}), "mode": "passive"},
        verdict=verdict,
        findings=[section(f.to_dict(), FindingEntry) for f in (c.ranked if c else [])],
        stages=[section(dataclasses.asdict(s), Stage) for s in stages], client=None,
        sweep=None, decompositions=[], timeseries=None, trace=_trace_section(trace),
        cross_rank=cross_rank_section(trace.cross_rank if trace is not None else None),
        telemetry=telemetry_section([run.path]), experiments=[], proposals=[],
        notes=list(c.notes) if c is not None else list(notes),
        elapsed_s=round(elapsed_s, 1), run_dir=str(run.path), **window).to_dict()


def window_section(c: PassiveConclusion, passive: dict[str, Any],
                   scrape: ScrapeSummary | None) -> WindowSection:
    facts = c.facts
    w = facts.window
    use_spans = c.spans is not None and covers(c.spans, facts)
    split = c.spans.split if use_spans and c.spans is not None else facts.split
    return WindowSection(
        label=facts.label,
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(w.start_wall))
        if w.start_wall else "-",
        seconds=round(w.seconds, 3), scrapes=w.scrapes, interval_s=w.interval_s,
        load_sent=False, requests_sent=dict(passive.get("requests_sent") or {}),
        traffic=dataclasses.asdict(facts.traffic), latency=latency_rows(c),
        split=_split_rows(split, SPANS_SOURCE if use_spans else HISTOGRAM_SOURCE),
        split_source="per-request spans (OTLP)" if use_spans else "histograms",
        points=window_points(facts), spikes=[_spike_row(s) for s in facts.spikes],
        stalls=[{"start_s": s.start_s, "end_s": s.end_s, "in_server": s.in_server}
                for s in facts.stalls],
        unseen=unseen(facts, c), scrape=_scrape_cost(scrape), notes=list(facts.notes))


def latency_rows(c: PassiveConclusion) -> list[LatencyRow]:
    rows = []
    for name, lat in c.facts.latency.items():
        rows.append(LatencyRow(name, lat.count, lat.mean_ms, _bounds(lat.p50), _bounds(lat.p99),
                               f"{lat.family} (histogram over the window)"))
    if c.spans is not None:
        for key, name in (("server_ttft_ms", "ttft"), ("queue_ms", "queue"),
                          ("prefill_ms", "prefill"), ("decode_ms", "decode"),
                          ("server_e2e_ms", "e2e")):
            d = c.spans.stats.get(key)
            if d and d.get("count"):
                rows.append(LatencyRow(f"{name} (spans)", d["count"], d["mean"],
                                       _exact(d["p50"]), _exact(d["p99"]),
                                       "per-request spans (OTLP): exact"))
    return rows


def _bounds(q: BucketedQuantile | None) -> dict[str, float | None] | None:
    """As report.json holds a quantile: ``{"value", "lower", "upper"}``."""
    return None if q is None else {"value": q.value, "lower": q.lower, "upper": q.upper}


def _exact(value: float | None) -> dict[str, float | None] | None:
    return None if value is None else {"value": value, "lower": value, "upper": value}


def _split_rows(split: Any, sources: dict[str, str]) -> list[ComponentRow]:
    if split is None:
        return []
    total = split.ttft_ms
    rows = [ComponentRow("ttft.server", "server TTFT (arrival -> first token)", None, total,
                         1.0, sources["ttft"], "")]
    for key, value in split.parts():
        share = value / total if total and 0 <= value <= total else None
        note = "" if share is not None or value >= 0 else \
            "negative: within the error of the figures it comes from"
        rows.append(ComponentRow(f"ttft.server.{key}", _SPLIT_LABELS[key], "ttft.server",
                                 value, share, sources[key], note))
    return rows


def window_points(facts: WindowFacts) -> list[WindowPoint]:
    spiked = [(s.start_s, s.end_s) for s in facts.spikes]
    out = []
    for i in facts.window.intervals:
        ttft, queue = i.hists.get("ttft"), i.hists.get("queue")
        p50, p99 = ((ttft.quantile(0.5), ttft.quantile(0.99)) if ttft is not None
                    and ttft.count > 0 else (None, None))
        arrivals = i.arrivals
        share = (queue.mean / ttft.mean if queue is not None and queue.mean is not None
                 and ttft is not None and ttft.mean else None)
        out.append(WindowPoint(
            t_s=round(i.end_s, 3),
            finished_rps=i.counters["finished"] / i.dt_s
            if "finished" in i.counters and i.dt_s > 0 else None,
            arrivals_rps=arrivals / i.dt_s if arrivals is not None and i.dt_s > 0 else None,
            running=i.gauges.get("running"), waiting=i.gauges.get("waiting"),
            kv_usage=i.gauges.get("kv"),
            ttft_mean_ms=ttft.mean * 1e3 if ttft is not None and ttft.mean is not None else None,
            ttft_p50_ms=_ms_of(p50), ttft_p99_ms=_ms_of(p99),
            queue_share=min(1.0, share) if share is not None else None,
            preemptions=i.counters.get("preemptions"),
            spike=any(a < i.end_s <= b for a, b in spiked)))
    return out


def _ms_of(q: Any) -> float | None:
    """A bucketed quantile's value in ms; None above the top finite bucket (a lower bound)."""
    return q.value * 1e3 if q is not None and not q.above_top_bucket else None


def _spike_row(s: Any) -> SpikeRow:
    return SpikeRow(s.start_s, s.end_s, s.ttft_mean_ms, _bounds(s.ttft_p99), s.queue_share,
                    s.waiting_max, s.kv_max, s.preemptions, list(s.binding))


def unseen(facts: WindowFacts, c: PassiveConclusion) -> list[str]:
    """What this window could not see or measure, one line each."""
    out = ["the knee and the server's capacity: no load was sent, so no sweep (diagnose "
           "with load on a staging replica measures them)",
           "the network and the clients' own delays: the server's TTFT starts at its frontend "
           "(a load run's client TTFT includes them)"]
    if facts.window.scrapes < 2:
        out.append("the server's queue, batch, KV cache and latencies: fewer than two /metrics "
                   "scrapes were read (the notes say why)")
        return out
    if not facts.window.has_vllm:
        out.append("the queue, batch, KV cache and TTFT: the server exposes no vllm:* series "
                   "(--disable-log-stats)")
        return out
    missing = [name for name in ("queue", "prefill", "ttft", "e2e") if name not in facts.latency]
    if missing:
        out.append(f"series this server does not export: {', '.join(missing)} (older vLLM "
                   "or a renamed series)")
    queue = facts.latency.get("queue")
    if queue is not None and queue.smallest_bucket_ms and c.spans is None:
        out.append(f"queue, prefill, decode and E2E quantiles below "
                   f"{queue.smallest_bucket_ms:.0f} ms: vLLM's request-phase histograms' first "
                   "bucket; that bucket is the error bound of such a quantile, the means are "
                   "exact (spans, --otlp-listen, give exact per-request values)")
    if facts.max_num_seqs is None:
        out.append("max_num_seqs: not on the command line latscope could read nor in a log "
                   "(--log FILE), so the batch cap is not named")
    return out


def _scrape_cost(scrape: ScrapeSummary | None) -> dict[str, Any] | None:
    """The scraper's cost as report.json's window holds it."""
    if scrape is None:
        return None
    keep = ("status", "interval_s", "scrapes", "failures", "scrape_ms", "parse_ms", "bytes",
            "busy_fraction", "errors")
    return {k: v for k in keep if (v := getattr(scrape, k)) is not UNSET}


__all__ = ["latency_rows", "passive_report", "unseen", "window_points",
           "window_section"]
