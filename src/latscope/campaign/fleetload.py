"""The fleet diagnosed through its balancer: latscope's client sends a load run to the balancer
while every replica's ``/metrics`` is scraped, so the client's TTFT stands beside each
replica's own and their difference, the balancer's and the network's part, is measured."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latscope.campaign.fleet import (
    Gathered,
    Progress,
    conclude_and_write,
    conclude_gathered,
    failing_run,
)
from latscope.fleet.model import RouterFacts
from latscope.fleet.replicas import ReplicaScrapers, read_replica_snapshots, replica_name
from latscope.model import MetricSnapshot, RequestRecord
from latscope.rundir import RunDir
from latscope.runfiles import BenchSummary, summary_of
from latscope.server.metrics import histogram_delta

LOAD_DIR = "load"


@dataclass(frozen=True, slots=True)
class BalancerOptions:
    url: str
    replicas: tuple[str, ...]
    concurrency: int = 8
    duration_s: float = 60.0
    input_len: str = "96..160"
    output_len: str = "32..96"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    scrape_interval_s: float = 1.0
    output_dir: str | None = None
    argv: list[str] = field(default_factory=list)


def diagnose_balancer(opts: BalancerOptions, progress: Progress) -> dict:
    """A load run through the balancer with the replicas scraped, diagnosed as a fleet."""
    from latscope.load import BenchConfig, WorkloadSpec
    from latscope.load.workers import run_load

    t0 = time.monotonic()
    scrapers = ReplicaScrapers(list(opts.replicas), opts.scrape_interval_s)
    run = RunDir.create("fleet", opts.output_dir, argv=opts.argv,
                        target={"balancer": opts.url, "replicas": list(scrapers.urls.values())})
    config = BenchConfig(url=opts.url, model=opts.model, api_key=opts.api_key,
                         workload=WorkloadSpec(input_len=opts.input_len,
                                               output_len=opts.output_len),
                         concurrency=opts.concurrency, num_requests=None,
                         duration_s=opts.duration_s, output_dir=run.path / LOAD_DIR)
    with failing_run(run):
        hop = hop_probe(opts.url, list(scrapers.urls.values()))
        run.write("hop.json", {"front_rtt_s": hop.front_rtt_s, "direct_rtt_s": hop.direct_rtt_s,
                               "probes": hop.probes, "note": hop.note})
        progress(f"c={opts.concurrency} for {opts.duration_s:g} s through {opts.url}, scraping "
                 f"{', '.join(scrapers.urls)} every {opts.scrape_interval_s:g} s")
        result = run_load(config, 1, [scrapers])
        gathered = balancer_gathered(result.run_dir, result.records, list(scrapers.urls),
                                     opts.url, summary_of(result.summary), hop)
        gathered.notes += [f"replica {n}: /metrics {s}" for n, s in scrapers.status().items()
                           if s != "ok"]
        return conclude_and_write(run, gathered, window=None, t0=t0,
                                  source="latscope's scrapes of each replica",
                                  progress=progress, balancer=opts.url)


HOP_PROBES = 20  # GET /health a path, keep-alive: what `latscope net` takes for a round trip


def hop_probe(balancer: str, replicas: list[str]) -> Hop:
    """The balancer's own hop, before the load: GET /health round trips through it and to each
    replica straight (keep-alive, p50 of ``HOP_PROBES``; ``env.net.probe``'s measurement). A
    path that fails is a note, never the run's end."""
    from latscope.env.net import probe

    front = probe(balancer, HOP_PROBES, stream_requests=0)
    direct = [probe(u, HOP_PROBES, stream_requests=0) for u in replicas]
    failed = [r.error for r in (front, *direct) if r.error or not r.keepalive_ms]
    if failed:
        return Hop(None, None, 0, f"the balancer's hop was not probed: {failed[0]}")
    pooled = [ms for r in direct for ms in r.keepalive_ms]
    return Hop(float(np.median(front.keepalive_ms)) / 1000, float(np.median(pooled)) / 1000,
               HOP_PROBES)


@dataclass(frozen=True, slots=True)
class Hop:
    front_rtt_s: float | None
    direct_rtt_s: float | None
    probes: int
    note: str = ""


def balancer_gathered(load_dir: Path, records: list[RequestRecord], names: list[str],
                      balancer: str, summary: BenchSummary, hop: Hop | None = None
                      ) -> Gathered:
    """Each replica's scrapes of a run and the router's facts (client beside replicas)."""
    snaps = read_replica_snapshots(load_dir, names)
    gathered = Gathered(snaps, {n: {"url": n} for n in names})
    gathered.router = router_facts(records, snaps, balancer, summary)
    if hop is not None and hop.note:
        gathered.notes.append(hop.note)
    if gathered.router is not None and hop is not None and hop.front_rtt_s is not None \
            and hop.direct_rtt_s is not None:
        gathered.router = dataclasses.replace(
            gathered.router, hop_s=max(0.0, hop.front_rtt_s - hop.direct_rtt_s),
            front_rtt_s=hop.front_rtt_s, direct_rtt_s=hop.direct_rtt_s, rtt_probes=hop.probes)
    if gathered.router is None:
        gathered.notes.append("the balancer's part was not measured: no request completed, "
                              "or no replica's TTFT histogram moved")
    return gathered


def router_facts(records: list[RequestRecord], snaps: dict[str, list[MetricSnapshot]],
                 balancer: str, summary: BenchSummary) -> RouterFacts | None:
    """The client's mean TTFT through the balancer beside the replicas' own mean TTFT over the
    run (their histograms between the scrapes that bracket it, weighted by requests)."""
    from latscope.campaign.observe import client_reliability
    from latscope.stats import lag_in_latency_ms, ttft_ms

    total = count = 0.0
    first_ns, last_ns = None, None
    for series in snaps.values():
        if len(series) >= 2:
            d = histogram_delta(series[0], series[-1], "vllm:time_to_first_token_seconds")
            if d is not None and d.count > 0:
                total, count = total + d.sum, count + d.count
            first_ns = min(first_ns or series[0].t_ns, series[0].t_ns)
            last_ns = max(last_ns or series[-1].t_ns, series[-1].t_ns)
    # the requests the replicas' TTFT histograms counted: every one whose first token came
    # between the scrapes that bracket the run (vLLM observes TTFT at the first token), the
    # closed loop's ramp (warm-up, sent before the first scrape) among them, so that both means
    # are over the same requests
    done = [r for r in records if r.ok and r.first_token_ns is not None
            and (first_ns is None or first_ns < r.first_token_ns <= (last_ns or 0))]
    ttfts = [t for r in done if (t := ttft_ms(r)) is not None]
    if not ttfts:
        return None
    if count <= 0:
        return None
    lags = [lag for r in done if (lag := lag_in_latency_ms(r)) is not None]
    client = client_reliability(summary, None)
    return RouterFacts(source=f"latscope's client through {balancer}",
                       front_ttft_s=float(np.mean(ttfts)) / 1000, front_count=len(ttfts),
                       replica_ttft_s=total / count, replica_count=count,
                       send_lag_s=float(np.mean(lags)) / 1000 if lags else 0.0,
                       reliable=client.reliable, why_unreliable=client.why)


def bench_fleet_report(result: Any, urls: list[str]) -> dict:
    """`bench --url BALANCER --replica URL ...`: the fleet's report of a finished run (its
    replicas' scrapes beside the client), built from the bench run directory, not written."""
    names = [replica_name(u) for u in urls]
    gathered = balancer_gathered(result.run_dir, result.records, names, result.config.url,
                                 summary_of(result.summary))
    report, _ = conclude_gathered(RunDir.open(result.run_dir), gathered, window=None,
                                  t0=time.monotonic(), source="latscope's scrapes of each "
                                  "replica", progress=lambda line: None,
                                  balancer=result.config.url)
    return report
