"""Diagnose a fleet of replicas: from the Prometheus server that already scrapes them
(``diagnose_prometheus``, passive: no request sent to any replica), or from a load run through
their balancer with every replica scraped (``diagnose_balancer``, active). Both gather each
replica's window as snapshots, diagnose every replica on its own (``replica_conclusion``), hand
the typed facts to the fleet's rules (``findings.fleet``) and write one run directory:
``manifest.json``, ``window.json``, ``replicas/<host_port>/...``, ``findings.json`` and the
reports (``report.json``, ``report.md``, ``report.html``). A failure leaves what was gathered on
disk, the manifest's status naming the cause in one line.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable

from latscope.campaign.fleetdoc import build_fleet_report, window_label
from latscope.campaign.fleetreplica import replica_conclusion
from latscope.errors import LatscopeError
from latscope.findings.conclude import conclude
from latscope.findings.inputs import ConclusionInputs
from latscope.fleet.facts import ReplicaFacts, replica_facts
from latscope.fleet.model import FleetFacts, RouterFacts
from latscope.fleet.prometheus import PrometheusClient, read_token_file
from latscope.fleet.replicas import REPLICAS_DIR
from latscope.fleet.window import FleetWindow, WindowSpec, read_window
from latscope.model import MetricSnapshot
from latscope.rundir import RunDir

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class PrometheusOptions:
    url: str
    start: float
    end: float
    step: float | None = None
    selector: str = ""
    replica_labels: tuple[str, ...] = ("instance",)
    token_file: str | None = None
    output_dir: str | None = None
    argv: list[str] = field(default_factory=list)


@dataclass
class Gathered:
    """What one fleet diagnosis read: each replica's snapshots and where they came from."""

    snapshots: dict[str, list[MetricSnapshot]]
    labels: dict[str, dict[str, str]]
    up: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    starts: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    router: RouterFacts | None = None


def diagnose_prometheus(opts: PrometheusOptions, progress: Progress) -> dict:
    """The fleet's window read from Prometheus, diagnosed; the report's dict."""
    t0 = time.monotonic()
    token = read_token_file(opts.token_file) if opts.token_file else None
    client = PrometheusClient(opts.url, token=token)
    spec = WindowSpec(opts.start, opts.end, opts.step, opts.selector, opts.replica_labels)
    run = RunDir.create("fleet", opts.output_dir, argv=opts.argv,
                        target={"prometheus": client.shown, "selector": opts.selector,
                                "replica_labels": list(opts.replica_labels)})
    shutil.rmtree(run.path / REPLICAS_DIR, ignore_errors=True)  # a reused -o: this run's only
    progress(f"reading {window_label(spec.start, spec.end)} of {client.shown}"
             + (f" {{{opts.selector}}}" if opts.selector else ""))
    with failing_run(run):
        window = read_window(client, spec)
        run.write("window.json", _window_doc(window))
        progress(f"{len(window.replicas)} replicas by {'+'.join(spec.replica_labels)}, step "
                 f"{window.step:g} s: {', '.join(r.name for r in window.replicas)}")
        gathered = Gathered({r.name: r.snapshots for r in window.replicas},
                            {r.name: r.labels for r in window.replicas},
                            {r.name: r.up for r in window.replicas},
                            {r.name: r.starts for r in window.replicas}, list(window.notes))
        _save_snapshots(run, gathered)
        return conclude_and_write(run, gathered, window=window, t0=t0,
                                  source=f"Prometheus at {client.shown}", progress=progress)


@contextlib.contextmanager
def failing_run(run: RunDir) -> Iterator[None]:
    """A failure or an interruption leaves the run directory saying so, in one line."""
    try:
        yield
    except KeyboardInterrupt:
        run.finish("interrupted")
        raise
    except LatscopeError as exc:
        run.finish(f"failed: {exc}")
        raise
    except Exception as exc:  # a bug: the manifest must not stay "running"
        run.finish(f"failed: {type(exc).__name__}: {exc}")
        raise


def conclude_and_write(run: RunDir, gathered: Gathered, *, window: FleetWindow | None,
                       t0: float, source: str, progress: Progress,
                       balancer: str | None = None) -> dict:
    """Facts per replica, each replica's own diagnosis, the fleet's rules, the reports."""
    from latscope.report.fleet import write_fleet_reports

    report, ranked = conclude_gathered(run, gathered, window=window, t0=t0, source=source,
                                       progress=progress, balancer=balancer)
    run.write_findings(ranked)
    write_fleet_reports(run.path, report)
    run.finish("ok")
    return report


def conclude_gathered(run: RunDir, gathered: Gathered, *, window: FleetWindow | None,
                      t0: float, source: str, progress: Progress,
                      balancer: str | None = None) -> tuple[dict, list]:
    """The fleet report's dict and the ranked findings, nothing written."""
    facts_list = [replica_facts(name, gathered.labels.get(name, {}), snaps,
                                up=gathered.up.get(name, []), starts=gathered.starts.get(name, []))
                  for name, snaps in gathered.snapshots.items()]
    start, end = _span(facts_list, window)
    label = window_label(start, end)
    conclusions = {f.name: replica_conclusion(f, gathered.snapshots[f.name], label, source)
                   for f in facts_list}
    step = window.step if window is not None else _median_step(facts_list)
    facts = FleetFacts(label, tuple(facts_list), conclusions, gathered.router, step, source)
    conclusion = conclude(ConclusionInputs(kind="fleet", fleet=facts))
    ranked, verdict, notes = conclusion.ranked, conclusion.verdict, list(conclusion.notes)
    progress(f"verdict: {verdict.text}")
    report = build_fleet_report(run, facts, ranked, verdict, window=window, balancer=balancer,
                                notes=[*gathered.notes, *notes], elapsed_s=time.monotonic() - t0)
    return report, ranked


def _span(facts: list[ReplicaFacts], window: FleetWindow | None) -> tuple[float, float]:
    if window is not None:
        return window.spec.start, window.spec.end
    firsts = [f.first_t for f in facts if f.first_t is not None]
    lasts = [f.last_t for f in facts if f.last_t is not None]
    now = time.time()
    return (min(firsts) if firsts else now, max(lasts) if lasts else now)


def _median_step(facts: list[ReplicaFacts]) -> float:
    steps = sorted(f.span_s / f.intervals for f in facts if f.intervals)
    return steps[len(steps) // 2] if steps else 0.0


def _window_doc(window: FleetWindow) -> dict:
    spec = window.spec
    return {"prometheus": window.prometheus, "start": spec.start, "end": spec.end,
            "step": window.step, "selector": spec.selector,
            "replica_labels": list(spec.replica_labels),
            "scrape_interval_s": window.scrape_interval_s, "metric_names": window.metric_names,
            "replicas": {r.name: {"labels": r.labels, "snapshots": len(r.snapshots),
                                  "up": r.up, "process_start": r.starts}
                         for r in window.replicas},
            "promql": [{"replica": f.replica, "metric": f.metric, "what": f.what,
                        "value": f.value, "expr": f.expr} for f in window.promql],
            "notes": window.notes}


def _save_snapshots(run: RunDir, gathered: Gathered) -> None:
    """Each replica's snapshots as ``replicas/<name>/metrics/snapshots.jsonl`` (the layout a
    direct scrape writes), so the window can be read again without Prometheus."""
    import orjson

    from latscope.fleet.replicas import replica_dir
    from latscope.rundir import write_bytes

    for name, snaps in gathered.snapshots.items():
        path = replica_dir(run.path, name) / "metrics" / "snapshots.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, b"".join(orjson.dumps(s) + b"\n" for s in snaps))  # dataclasses
