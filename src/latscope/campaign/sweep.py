"""Sweeps, run: each step one observed bench run (``campaign.observe``), steps decided by the
pure logic of ``analysis.sweep`` (growth, stop rules, knee, operating point)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from latscope.analysis.knee import SloTerm
from latscope.analysis.sweep import (
    Step,
    StopRules,
    SweepAnalysis,
    analyse,
    flatten_summary,
    noise_estimates,
    run_sweep,
)
from latscope.analysis.sweepfile import SweepFile, SweepMeta
from latscope.model import Finding

# Leaves of the latency decomposition compared across steps ("what grows at the knee").
GROWTH_KEYS = ("ttft.client", "ttft.network", "ttft.frontend", "ttft.server.queue",
               "ttft.server.prefill", "ttft.server.other", "e2e.decode")


def bench_step(base: Any, load: float, mode: str, run_dir: Path, *, warmup: int | None,
               scrape_interval_s: float, network_rtt_ms: float | None = None) -> Step:
    """One load run at ``load`` (``mode`` "concurrency" or "rate") with /metrics scraped.

    ``base`` is a ``latscope.load.BenchConfig``; warm-up defaults to one request per concurrency
    slot (at least 2) so each step starts from a filled batch rather than an idle server. Each
    load gets prompts of its own (a seed drawn from ``base.seed``, the mode and the load): with
    ``base.seed`` for every step, each step resent the last one's prompts, and a server's prefix
    cache served every step after the first from them.
    """
    from latscope.campaign.observe import observe

    changes: dict[str, Any] = {"output_dir": run_dir, "seed": step_seed(base.seed, mode, load)}
    if mode == "concurrency":
        changes.update(concurrency=int(load), rate=None)
    else:
        changes.update(rate=float(load))
    changes["warmup"] = warmup if warmup is not None else max(2, int(min(load, 64)))
    obs = observe(dataclasses.replace(base, **changes), scrape_interval_s=scrape_interval_s,
                  network_rtt_ms=network_rtt_ms)
    return step_of(load, obs)


def step_seed(seed: int, mode: str, load: float) -> int:
    """The seed of the step at ``load``: the same for the same sweep seed, mode and load (a
    tune's trials send alike prompts, each to a fresh server), another for every other load."""
    from latscope.campaign.observe import run_seed

    return run_seed(seed, (1 if mode == "concurrency" else 2) * 10**12 + round(load * 1000))


def step_of(load: float, obs: Any) -> Step:
    """A sweep ``Step`` from one ``Observation``: flat metrics, noise, prefix-cache hit rate and
    the mean ms of each decomposition leaf."""
    summary = obs.summary
    metrics = flatten_summary(summary)
    metrics.update(noise_estimates(summary, metrics))
    metrics["prefix_cache_hit_rate"] = obs.prefix_cache_hit_rate
    leaves = {c.key: c.mean_ms for c in (obs.decomposition.components if obs.decomposition
                                          else []) if c.mean_ms is not None}
    return Step(load, metrics, run_dir=str(obs.run_dir), decomposition=leaves)


@dataclass
class SweepResult:
    steps: list[Step]
    analysis: SweepAnalysis
    findings: list[Finding]
    document: SweepFile  # sweep.json


def sweep(base: Any, mode: str, loads: Sequence[float] | None, out: Path, *,
          slo: Sequence[SloTerm], rules: StopRules, start: float = 1, factor: float = 2.0,
          refine: int = 2, backoff: float = 0.10, latency: str = "e2e_p50_ms",
          warmup: int | None = None, scrape_interval_s: float = 1.0,
          per_step_requests: Callable[[float], int] | None = None,
          meta: SweepMeta | None = None,
          on_step: Callable[[Step], None] = lambda step: None) -> SweepResult:
    """Measure the sweep; ``out/sweep.json`` is rewritten after every step (Ctrl-C keeps it)."""
    from latscope.analysis.sweepfile import write_sweep
    from latscope.findings.sweep import sweep_findings
    from latscope.report.sweep import sweep_document

    integer = mode == "concurrency"
    unit = "concurrency" if integer else "request rate"

    def measure(load: float, phase: str) -> Step:
        step_dir = out / f"step-{len(list(out.glob('step-*'))):02d}-{mode}-{load:g}"
        cfg = base if per_step_requests is None else dataclasses.replace(
            base, num_requests=per_step_requests(load))
        return bench_step(cfg, load, mode, step_dir, warmup=warmup,
                          scrape_interval_s=scrape_interval_s)

    def document(steps: list[Step]) -> SweepResult:
        analysis = analyse(steps, slo, backoff=backoff, integer=integer, latency=latency)
        findings = sweep_findings(steps, analysis, slo, unit, str(out / "sweep.json"))
        doc = sweep_document(steps, analysis, findings, meta)
        write_sweep(out / "sweep.json", doc)
        return SweepResult(list(steps), analysis, findings, doc)

    def after(steps: list[Step]) -> None:
        document(steps)
        on_step(steps[-1])

    steps = run_sweep(measure, loads, start=start, factor=factor, refine=refine, integer=integer,
                      rules=rules, on_step=after)
    return document(steps)

