"""A fleet run re-derived from its run directory with this latscope, no Prometheus and no
replica asked: each replica's stored snapshots (``replicas/`` or ``load/replicas/``), the window
and Prometheus' own figures (``window.json``), the client's records and the balancer's probe
(``load/``, ``hop.json``), concluded again into a new run directory (``diagnose --replay``)."""

from __future__ import annotations

import time
from pathlib import Path

from latscope.campaign.fleet import Gathered, Progress, conclude_and_write, failing_run
from latscope.errors import ConfigError
from latscope.fleet.replicas import replica_dir
from latscope.fleet.window import FleetWindow, PromqlFigure, WindowSpec
from latscope.rundir import RunDir
from latscope.server.scrape import read_snapshots

HOP = "hop.json"


def replay_fleet(run_dir: str | Path, output_dir: str | Path | None, argv: list[str],
                 progress: Progress) -> dict:
    t0 = time.monotonic()
    src = RunDir.open(run_dir)
    if src.kind != "fleet":
        raise ConfigError(f"{run_dir}: a {src.kind or 'unknown'} run, not a fleet run")
    out = RunDir.create("fleet", output_dir or Path(run_dir) / "replay", argv=argv,
                        target=src.manifest.get("target") or {}, replayed_from=str(src.path))
    with failing_run(out):
        doc = src.read("window.json")
        if doc is not None:
            window = _window(doc)
            gathered = _prometheus_gathered(src.path, doc)
            source = f"Prometheus at {doc.get('prometheus')} (replayed)"
            balancer = None
        else:
            window, gathered, balancer = None, _active_gathered(src), _balancer(src)
            source = "latscope's scrapes of each replica (replayed)"
        progress(f"replaying {src.path}: {len(gathered.snapshots)} replicas")
        return conclude_and_write(out, gathered, window=window, t0=t0, source=source,
                                  progress=progress, balancer=balancer)


def _window(doc: dict) -> FleetWindow:
    spec = WindowSpec(doc["start"], doc["end"], doc["step"], doc.get("selector", ""),
                      tuple(doc.get("replica_labels") or ("instance",)))
    promql = [PromqlFigure(f["replica"], f["metric"], f["what"], f["value"], f["expr"])
              for f in doc.get("promql") or ()]
    return FleetWindow(spec, doc["step"], doc.get("prometheus", ""), [],
                       doc.get("scrape_interval_s"), promql, list(doc.get("notes") or ()),
                       list(doc.get("metric_names") or ()))


def _prometheus_gathered(path: Path, doc: dict) -> Gathered:
    replicas = doc.get("replicas") or {}
    snaps = {name: read_snapshots(replica_dir(path, name)) for name in replicas}
    missing = [n for n, s in snaps.items() if not s]
    if missing and len(missing) == len(snaps):
        raise ConfigError(f"{path}: no replica's snapshots are stored (replicas/*/metrics/)")
    return Gathered(snaps, {n: dict(r.get("labels") or {}) for n, r in replicas.items()},
                    {n: [tuple(p) for p in r.get("up") or ()] for n, r in replicas.items()},
                    {n: [tuple(p) for p in r.get("process_start") or ()]
                     for n, r in replicas.items()},
                    list(doc.get("notes") or ()))


def _balancer(src: RunDir) -> str | None:
    return (src.manifest.get("target") or {}).get("balancer")


def _active_gathered(src: RunDir) -> Gathered:
    from latscope.campaign.fleetload import LOAD_DIR, Hop, balancer_gathered
    from latscope.fleet.replicas import replica_name
    from latscope.rundir import read_run
    from latscope.runfiles import summary_of

    target = src.manifest.get("target") or {}
    urls = list(target.get("replicas") or ())
    load = src.path / LOAD_DIR
    if not urls or not load.is_dir():
        raise ConfigError(f"{src.path}: neither window.json nor load/ with its replicas: "
                          "nothing to replay")
    _, records, summary = read_run(load)
    stored = src.read(HOP)
    hop = Hop(stored.get("front_rtt_s"), stored.get("direct_rtt_s"), stored.get("probes", 0),
              stored.get("note", "")) if isinstance(stored, dict) else None
    return balancer_gathered(load, records, [replica_name(u) for u in urls],
                             target.get("balancer") or "", summary_of(summary), hop)
