"""A passive run directory read back and concluded: what the live run does at its end and what
``diagnose --replay`` does later, the same function over the same files, so the two agree.

Read: ``metrics/snapshots.jsonl`` (the window's scrapes), ``metrics/scrape.json`` (failures,
renamed series, the scraper's cost), ``log.json`` (the parsed log of the window), ``spans.jsonl``
(OTLP), ``telemetry/`` and ``host/cpu.json`` (this host only), ``doctor.json`` and ``net.json``
(read as stored: facts of the live host), ``trace.json``; the manifest's ``passive`` (what
latscope sent). Written: ``window.json`` (the window's intervals and totals), ``report.json``,
``report.html``, ``report.md``, ``findings.json``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Sequence

from latscope.campaign.passive import PassiveConclusion, conclude_window
from latscope.campaign.state import StageRecord
from latscope.model import Finding
from latscope.rundir import RunDir
from latscope.server.scrape import ScrapeSummary, read_scrape_summary

if TYPE_CHECKING:
    from latscope.telemetry.facts import TelemetryFacts
    from latscope.trace.files import StoredTrace


@dataclasses.dataclass
class _Stored:
    """A stage whose findings are read as stored (doctor, net)."""

    findings: list[Finding]
    facts: dict[str, Any]


def conclude_dir(run: RunDir, *, stages: Sequence[StageRecord] | None = None,
                 notes: Sequence[str] = (), elapsed_s: float | None = None,
                 replayed_from: str | None = None) -> dict[str, Any]:
    """Conclude the passive run in ``run``, write its reports; the report's dict."""
    from latscope.campaign.passive_report import passive_report

    if stages is None:
        stages = [StageRecord(**s) for s in run.read("stages.json", [])]
    scrape = read_scrape_summary(run.path)
    inputs = read_inputs(run)
    all_notes = list(notes) + scrape_notes(scrape)
    try:
        conclusion: PassiveConclusion | None = conclude_window(**inputs, notes=all_notes)
        broken = None
    except Exception as exc:  # noqa: BLE001 -- a bug: recorded, the gathered files stay
        conclusion, broken = None, f"the window could not be concluded: {type(exc).__name__}: {exc}"
        stages = [*stages, StageRecord("conclude", status="failed", note=broken)]
    report = passive_report(run, conclusion, stages=list(stages), scrape=scrape,
                            notes=all_notes, broken=broken,
                            elapsed_s=elapsed_s if elapsed_s is not None else 0.0)
    if replayed_from is not None:
        report["replayed_from"] = replayed_from
    _write(run, report, conclusion)
    return report


def read_inputs(run: RunDir) -> dict[str, Any]:
    """``conclude_window``'s arguments from the run directory's files."""
    from latscope.env.hostload import read_cpu_usage
    from latscope.server.logs import server_log_from_dict
    from latscope.server.otlp_record import read_spans
    from latscope.server.scrape import read_snapshots
    from latscope.telemetry.facts import telemetry_facts

    log_json = run.read("log.json") or {}
    telemetry = telemetry_facts(run.path)
    return {
        "snapshots": read_snapshots(run.path),
        "label": (run.manifest.get("passive") or {}).get("label"),
        "log": server_log_from_dict(log_json["parsed"]) if log_json.get("parsed") else None,
        "spans": read_spans(run.path) or None,
        "telemetry": telemetry if telemetry.ok else None,
        "host_cpu": read_cpu_usage(run.path),
        "doctor": _stored(run.read("doctor.json")),
        "net": _stored(run.read("net.json")),
        "trace": _trace(run),
        "profiled": "--profile" in (run.manifest.get("command") or ""),
        "same_host": (run.manifest.get("target") or {}).get("same_host"),
        "gpu_util": _gpu_util(run, telemetry),
    }


def _trace(run: RunDir) -> StoredTrace | None:
    from latscope.trace.files import read_stored

    data = run.read("trace.json")
    return read_stored(data, str(run.file("trace.json"))) if data else None


def _gpu_util(run: RunDir, telemetry: TelemetryFacts) -> list[tuple[float, float]]:
    """The server's GPUs' busiest reading at each sample time."""
    from latscope.telemetry.sampler import read_telemetry

    if not telemetry.ok:
        return []
    gpus = set(telemetry.gpus)
    busiest: dict[float, float] = {}
    for s in read_telemetry(run.path)[1]:
        if s.gpu in gpus and s.util_pct is not None:
            busiest[s.wall_time] = max(busiest.get(s.wall_time, 0.0), float(s.util_pct))
    return sorted(busiest.items())


def _stored(data: dict[str, Any] | None) -> _Stored | None:
    if not data:
        return None
    return _Stored([Finding.from_dict(f) for f in data.get("findings", [])],
                   data.get("facts") or {})


def scrape_notes(scrape: ScrapeSummary | None) -> list[str]:
    """What the scraper has to say: failures (with when the first and last were), a page it
    refused, vLLM's old series names read under their new ones, no /metrics at all."""
    if not scrape:
        return ["no /metrics scrape was recorded"]
    out = []
    status = scrape.status
    if status == "no_metrics_endpoint":
        out.append("the server has no /metrics endpoint (HTTP 404): nothing of its queue, "
                   "batch or latency could be seen")
    elif status == "unreachable":
        out.append("no scrape of /metrics succeeded")
    log = scrape.failure_log
    if log:
        first, last = log[0], log[-1]
        out.append(f"{scrape.failures} scrape(s) failed, "
                   f"{_utc(first.wall_time)} to {_utc(last.wall_time)} UTC; the first: "
                   f"{first.error}" + (f"; the last: {last.error}" if len(log) > 1 else ""))
    families = sorted({(_family(old), _family(new)) for old, new in scrape.renamed.items()})
    if families:
        out.append("older vLLM series read under their current names: " + ", ".join(
            f"{old} -> {new}" for old, new in families))
    return out


def _family(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _utc(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(wall))


def _write(run: RunDir, report: dict[str, Any], conclusion: PassiveConclusion | None) -> None:
    from latscope.report.write import write_reports

    if conclusion is not None:
        run.write("window.json", window_json(conclusion))
        run.write_findings(conclusion.ranked)
    write_reports(run.path, report)


def window_json(c: PassiveConclusion) -> dict[str, Any]:
    """The window as concluded: its totals, traffic, split, spikes, stalls and intervals."""
    facts = c.facts
    w = facts.window

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return {"label": facts.label, "start_wall": w.start_wall, "end_wall": w.end_wall,
            "seconds": w.seconds, "scrapes": w.scrapes, "interval_s": w.interval_s,
            "traffic": plain(facts.traffic), "split": plain(facts.split),
            "latency": plain(facts.latency), "spikes": plain(facts.spikes),
            "stalls": plain(facts.stalls), "resets": list(w.resets),
            "bucket_changes": plain(w.bucket_changes), "gaps": plain(w.gaps),
            "max_num_seqs": facts.max_num_seqs,
            "max_num_batched_tokens": facts.max_num_batched_tokens,
            "spans": plain(c.spans), "counters": w.counters,
            "intervals": [{**{k: plain(getattr(i, k)) for k in (
                "start_s", "end_s", "end_wall", "counters", "gauges", "reset",
                "edges_changed", "gap")},
                "hists": {k: {"count": h.count, "sum": h.sum} for k, h in i.hists.items()}}
                for i in w.intervals]}


def replay_passive(run: RunDir, replayed_from: str) -> dict[str, Any]:
    """``diagnose --replay`` of a passive run (``run`` is the copy being worked on)."""
    notes = (run.manifest.get("passive") or {}).get("notes") or []  # the live run's own
    return conclude_dir(run, notes=notes, replayed_from=replayed_from)
