"""Tune trials, run: how a trial's server is started (``serve_cmd_launcher``, ``local_launcher``)
and measured (``fixed_measure``, ``sweep_measure``); the search itself is ``analysis.tune``."""

from __future__ import annotations

import contextlib
import shlex
import string
from pathlib import Path
from typing import Any, Iterator, Sequence

from latscope.analysis.knee import SloTerm, meets_slo
from latscope.analysis.search import Config
from latscope.analysis.tune import Launch, LoadValue, Measure, TrialRun, flag_args
from latscope.errors import ConfigError


def serve_command(template: str, config: Config, port: int) -> list[str]:
    """Fill ``{name}``/``{port}`` placeholders; every tuned flag must appear in the template."""
    names = {field_name for _, field_name, _, _ in string.Formatter().parse(template) if field_name}
    missing = sorted(set(config) - names)
    if missing:
        raise ConfigError(f"--serve-cmd has no placeholder for {', '.join('{' + m + '}' for m in missing)}: "
                          "tuning it would change nothing")
    unknown = sorted(names - set(config) - {"port"})
    if unknown:
        raise ConfigError(f"--serve-cmd placeholder(s) {unknown} match no --param (or {{port}})")
    return shlex.split(template.format(**config, port=port))


def serve_cmd_launcher(template: str, *, host: str = "127.0.0.1", port: int | None = None,
                       ready_timeout: float = 600.0, model: str = "",
                       health_path: str = "/health") -> Launch:
    """Start ``template`` filled with the configuration as a ``ManagedServer`` (own process group,
    ready when ``/health`` answers, stopped by group: never by name)."""
    from latscope.server.process import ManagedServer
    from latscope.server.target import free_port

    @contextlib.contextmanager
    def launch(config: Config, trial_dir: Path,
               env: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
        chosen = port or free_port(host)
        url = f"http://{host}:{chosen}"
        server = ManagedServer(serve_command(template, config, chosen), log_path=trial_dir / "server.log",
                               health_url=f"{url}{health_path}", ready_timeout=ready_timeout,
                               env=env)  # env: the trial's GPUs (tune --gpus-per-trial)
        with server:
            yield url, model

    return launch


def local_launcher(*, ready_timeout: float = 600.0, model: str = "tiny") -> Launch:
    """The embedded vLLM (``LocalTarget``) with the configuration as vLLM flags."""
    from latscope.server.target import LocalTarget

    @contextlib.contextmanager
    def launch(config: Config, trial_dir: Path,
               env: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
        with LocalTarget(model=model, serve_args=flag_args(config), log_dir=trial_dir,
                         ready_timeout=ready_timeout, env=env) as target:
            yield target.url, target.model_name

    return launch


def fixed_measure(base: Any, mode: str, load: float, *, warmup: int | None,
                  scrape_interval_s: float) -> Measure:
    """Every trial runs the same bench workload (``base``: a BenchConfig) at one load."""
    from latscope.campaign.sweep import bench_step

    def measure(url: str, model: str, run_dir: Path) -> TrialRun:
        import dataclasses
        cfg = dataclasses.replace(base, url=url, model=model or base.model)
        step = bench_step(cfg, load, mode, run_dir, warmup=warmup, scrape_interval_s=scrape_interval_s)
        return TrialRun(metrics={**step.metrics, "load": load},
                        decomposition=step.decomposition)

    return measure


def sweep_measure(base: Any, mode: str, loads: Sequence[float] | None, slo: Sequence[SloTerm], *,
                  objective: str, warmup: int | None, scrape_interval_s: float,
                  rules: Any = None) -> Measure:
    """Every trial sweeps its server; the trial's metrics are those of the step with the highest
    ``objective`` that meets the SLO (the configuration's capacity under the SLO), or of the
    lowest step when none does (so the trial is infeasible and scored by its violation)."""
    from latscope.analysis.sweep import run_sweep
    from latscope.campaign.sweep import bench_step

    def measure(url: str, model: str, run_dir: Path) -> TrialRun:
        import dataclasses
        cfg = dataclasses.replace(base, url=url, model=model or base.model)
        steps = run_sweep(lambda load, phase: bench_step(cfg, load, mode, run_dir / f"{mode}-{load:g}",
                                                         warmup=warmup, scrape_interval_s=scrape_interval_s),
                          loads, integer=mode == "concurrency", rules=rules)
        ok = [s for s in steps if meets_slo(s.metrics, slo)]
        pick = max(ok, key=lambda s: s.metrics.get(objective) or 0.0) if ok else steps[0]
        return TrialRun(metrics={**pick.metrics, "load": pick.load},
                        decomposition=pick.decomposition,
                        sweep=[LoadValue(s.load, s.metrics.get(objective)) for s in steps])

    return measure
