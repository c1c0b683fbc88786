"""One observed load run: ``bench`` with ``/metrics`` scraped, decomposed, its findings made."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from latscope.analysis.decompose import Decomposition, decompose_run
from latscope.env.hostload import HostCpu
from latscope.load import BenchConfig, BenchResult
from latscope.model import Finding, MetricSnapshot, RequestRecord
from latscope.reliability import ClientReliability, judge_client
from latscope.runfiles import BenchSummary, summary_of
from latscope.server.metrics import counter_delta
from latscope.server.scrape import MetricsScraper, read_snapshots
from latscope.telemetry.facts import TelemetryFacts, telemetry_facts


@dataclass
class Observation:
    """One load run as diagnose uses it: every fact read from its run directory once, here
    (the conclusion reads no file)."""

    result: BenchResult
    decomposition: Decomposition | None
    findings: list[Finding]
    snapshots: list[MetricSnapshot]
    client: ClientReliability
    prefix_cache_hit_rate: float | None = None
    warm: bool = False  # warm-up requests ran (and were excluded) before the measured ones
    extra: dict[str, Any] = field(default_factory=dict)  # telemetry, cpu: facts of the run

    @property
    def telemetry(self) -> TelemetryFacts | None:
        telemetry: TelemetryFacts | None = self.extra.get("telemetry")
        return telemetry

    @property
    def cpu(self) -> HostCpu | None:
        """The host's CPUs over the run (``env.hostload``'s host/cpu.json), if recorded."""
        cpu: HostCpu | None = self.extra.get("cpu")
        return cpu

    @property
    def run_dir(self) -> Path:
        return self.result.run_dir

    @property
    def summary(self) -> BenchSummary:
        """The run's summary.json, typed (read from the run's result once)."""
        typed = self.extra.get("summary")
        if not isinstance(typed, BenchSummary):
            typed = summary_of(self.result.summary, str(self.run_dir / "summary.json"))
            self.extra["summary"] = typed
        return typed

    @property
    def records(self) -> list[RequestRecord]:
        return self.result.records


def observe(config: BenchConfig, *, scrape_interval_s: float = 2.0,
            network_rtt_ms: float | None = None, measured_at: str = "",
            same_host: bool | None = None, max_num_seqs: int | None = None,
            max_num_seqs_source: str = "", observers: Sequence[Any] = (),
            on_record: Callable[[RequestRecord], None] | None = None,
            collector: Any = None, metrics_url: str | None = None,
            server_pids: set[int] | None = None, host_load: bool = True,
            gpu_telemetry: bool | None = None, workers: int | str = "auto") -> Observation:
    """Run ``config`` with ``/metrics`` scraped (``scrape_interval_s`` 0: not scraped), then
    decompose it and make its findings; everything is also written to the run directory.
    ``metrics_url``: the server to scrape when the load goes through a proxy in front of it.
    With ``collector`` (a ``SpanCollector`` the server exports to), requests are traced and the
    decomposition is per request, from the server's spans. ``host_load``: the CPU used by
    latscope, the server (``server_pids`` and their children) and every other process over the
    run, in ``host/cpu.json`` (``env.hostload``). ``gpu_telemetry``: sample the GPUs beside the
    scrapes (None: when the server is on this host, latscope.telemetry). ``workers``: client
    processes (``latscope.load.workers.run_load``; "auto": more than one only when the load
    needs them and the host has spare cores)."""
    from latscope.env.hostload import HostLoadSampler
    from latscope.load.workers import run_load

    scrapers: list[Any] = ([MetricsScraper(interval_s=scrape_interval_s, base_url=metrics_url)]
                           if scrape_interval_s > 0 else [])
    scrapers += gpu_sampler(metrics_url or config.url, scrape_interval_s, gpu_telemetry,
                            same_host)
    if host_load:
        scrapers.append(HostLoadSampler(server_pids))
    if collector is not None:
        config, observers, on_record = _traced(config, collector, observers, on_record)
    result = run_load(config, workers, [*scrapers, *observers], on_record=on_record)
    return observation_of(result, scraped=scrape_interval_s > 0, network_rtt_ms=network_rtt_ms,
                          measured_at=measured_at, same_host=same_host,
                          max_num_seqs=max_num_seqs, max_num_seqs_source=max_num_seqs_source)


def observation_of(result: BenchResult, *, scraped: bool, network_rtt_ms: float | None = None,
                   measured_at: str = "", same_host: bool | None = None,
                   max_num_seqs: int | None = None, max_num_seqs_source: str = "",
                   ) -> Observation:
    """A finished bench run's decomposition, findings, client reliability and prefix-cache hit
    rate, from its run directory (``bench`` and every campaign use this one function). The hit
    rate and the warm-up are also recorded in the run's ``summary.json`` under ``server``, so
    any two runs compared later say whether the prefix cache served them alike."""
    snapshots = read_snapshots(result.run_dir) if scraped else []
    decomposition = (decompose_run(result.run_dir, network_rtt_ms=network_rtt_ms)
                     if scraped else None)
    from latscope.env.hostload import read_cpu_usage
    from latscope.findings.conclude import findings_at
    from latscope.findings.inputs import Measured, PromptReuse, ServerLimits

    client = client_reliability(summary_of(result.summary), decomposition)
    telemetry = telemetry_facts(result.run_dir)
    cpu = read_cpu_usage(result.run_dir)
    hit_rate = prefix_cache_hit_rate(snapshots)
    label = measured_at or result.run_dir.name
    # the findings of this one run: the one seam's rules at one load (findings.conclude)
    findings = findings_at(
        Measured(label=measured_at, decomposition=decomposition, snapshots=tuple(snapshots),
                 telemetry=telemetry, client=client,
                 prompts=PromptReuse(hit_rate, _prompts_share(result), result.config.seed),
                 source=f"/metrics during the run ({label})"),
        same_host, ServerLimits(max_num_seqs, max_num_seqs_source), scraped=scraped)
    warm = bool(result.config.warmup)
    _record_comparability(result, hit_rate, warm)
    if decomposition is not None:
        decomposition.findings = findings
    return Observation(result, decomposition, findings, snapshots, client,
                       prefix_cache_hit_rate=hit_rate, warm=warm,
                       extra={"telemetry": telemetry, "cpu": cpu})


def _prompts_share(result: BenchResult) -> bool:
    """Whether a run's prompts were drawn to share a prefix (completions only: a chat template
    is a prefix every request shares)."""
    cfg = result.config
    return bool(cfg.workload.prefix_len or cfg.workload.dataset) or cfg.endpoint != "completions"


def gpu_sampler(server_url: str, interval_s: float, enabled: bool | None,
                same_host: bool | None) -> list[Any]:
    """A ``TelemetrySampler`` at the scrape interval when the server is on this host (a remote
    server's GPUs cannot be read from here), or when asked for; [] otherwise."""
    from latscope.env.serverfacts import is_local
    from latscope.server.hostview import url_port
    from latscope.telemetry.sampler import TelemetrySampler

    if enabled is False or interval_s <= 0:
        return []
    if enabled is None and not (same_host if same_host is not None else is_local(server_url)):
        return []
    return [TelemetrySampler(interval_s=interval_s, server_port=url_port(server_url))]


def _record_comparability(result: BenchResult, hit_rate: float | None, warm: bool) -> None:
    from latscope.rundir import write_json

    result.summary["server"] = {**(result.summary.get("server") or {}),
                                "prefix_cache_hit_rate": hit_rate,
                                "warmup_requests": result.config.warmup, "warm": warm}
    write_json(result.run_dir / "summary.json", result.summary)


def _traced(config: BenchConfig, collector: Any, observers: Sequence[Any],
            on_record: Callable[[RequestRecord], None] | None) -> tuple[Any, list[Any], Any]:
    from latscope.server.otlp_record import SpanRecorder

    recorder = SpanRecorder(collector)

    def expect(record: RequestRecord) -> None:
        if record.ok and not record.warmup:  # its span is awaited before the run ends
            recorder.expect(record.trace_id)
        if on_record is not None:
            on_record(record)

    return (dataclasses.replace(config, trace_requests=True), [*observers, recorder], expect)


def client_reliability(summary: BenchSummary, decomposition: Decomposition | None
                       ) -> ClientReliability:
    """Whether the client's own timing can be trusted in this run (``latscope.reliability``'s
    one table of thresholds), with the share of TTFT its own delay took where the run's
    decomposition split it off."""
    comp = decomposition.component("ttft.client") if decomposition else None
    total = decomposition.component("ttft") if decomposition else None
    return judge_client(summary, comp.mean_ms if comp else None,
                        total.mean_ms if total else None)


def prefix_cache_hit_rate(snapshots: list[MetricSnapshot]) -> float | None:
    """Prefix-cache hits / queries (tokens) over the run window, from ``/metrics``."""
    if len(snapshots) < 2:
        return None
    first, last = snapshots[0], snapshots[-1]
    queries = counter_delta(first, last, "vllm:prefix_cache_queries_total")
    hits = counter_delta(first, last, "vllm:prefix_cache_hits_total")
    if queries is None or hits is None or queries.delta <= 0:
        return None
    return max(0.0, min(1.0, hits.delta / queries.delta))


def with_load(config: BenchConfig, *, concurrency: int | None = None, rate: float | None = None,
              num_requests: int, output_dir: Path, warmup: int, seed: int) -> BenchConfig:
    """``config`` at one load level, its own run directory and its own prompts (``seed`` within
    the campaign, mixed with ``config.seed``: diagnose draws that one per campaign), so that no
    run is served from another run's prefix cache, a run of an earlier campaign's included."""
    return dataclasses.replace(config, concurrency=concurrency, rate=rate,
                               num_requests=num_requests, duration_s=None, output_dir=output_dir,
                               warmup=warmup, seed=run_seed(config.seed, seed))


def run_seed(campaign_seed: int, seed: int) -> int:
    """One run's seed from its campaign's and its own number in the campaign."""
    state = np.random.SeedSequence([campaign_seed, seed]).generate_state(1)[0]
    return int(state & 0x7FFFFFFF)
