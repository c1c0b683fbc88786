"""`latscope tune`: restart the server per flag configuration, search adaptively, validate.

Every trial starts the server (``--serve-cmd`` template or ``--local``), runs a fixed workload or a
sweep on it, and stops it by process group. ``tune.json`` is rewritten after every trial; an
interrupted tune goes on with ``latscope tune --resume DIR``. See docs/sweep.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from latscope.cli.common import add_api_key_argument

if TYPE_CHECKING:
    from latscope.analysis.search import Config
    from latscope.analysis.tune import TuneResult, TuneState

HELP = "search server flags (max-num-seqs, max-num-batched-tokens, ...) with few restarts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    server = parser.add_argument_group("server")
    server.add_argument("--serve-cmd", help="command with {flag} and {port} placeholders, e.g. "
                        "\"vllm serve M --port {port} --max-num-seqs {max_num_seqs}\"")
    server.add_argument("--local", action="store_true", help="tune the embedded tiny vLLM")
    server.add_argument("--param", action="append", default=[],
                        help="NAME=LO..HI (doubling), NAME=LO..HI*F or NAME=A,B,C; repeat per flag")
    server.add_argument("--start", action="append", default=[],
                        help="NAME=VALUE of the baseline configuration (default: middle values)")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, help="fixed port when --serve-cmd has no {port}")
    server.add_argument("--ready-timeout", type=float, default=600.0)
    server.add_argument("--health-path", default="/health",
                        help="ready when GET PATH answers 200 (default /health)")
    server.add_argument("--model", help="model name for requests (default: first of /v1/models)")
    add_api_key_argument(server)
    server.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    server.add_argument("--tokenizer", help="local tokenizer dir or tokenizer.json")

    work = parser.add_argument_group("workload per trial")
    work.add_argument("--per-trial", choices=("fixed", "sweep"), default="fixed",
                      help="fixed: one run at --concurrency/--request-rate; sweep: find each "
                           "configuration's highest throughput meeting the SLO")
    work.add_argument("--concurrency", default=None,
                      help="fixed: N (default 16); sweep: 'auto' (default) or a list")
    work.add_argument("--request-rate", dest="rate", help="open loop instead (req/s; list for sweep)")
    work.add_argument("-n", "--num-requests", type=int, default=64)
    work.add_argument("--duration", type=float, default=None)
    work.add_argument("--warmup", type=int, default=None)
    work.add_argument("--input-len", default="128")
    work.add_argument("--output-len", default="64")
    work.add_argument("--workload", help="TOML/YAML workload file")
    work.add_argument("--seed", type=int, default=0)
    work.add_argument("--scrape-interval", type=float, default=1.0)

    goal = parser.add_argument_group("goal and search")
    goal.add_argument("--slo", default="", help="e.g. ttft_p99_ms<=500,itl_p99_ms<=50")
    goal.add_argument("--objective", default="requests_per_s",
                      help="metric to maximise (default requests_per_s)")
    goal.add_argument("--latency", default="e2e_p99_ms", help="latency axis of the Pareto front")
    goal.add_argument("--search", choices=("coordinate", "grid"), default="coordinate")
    goal.add_argument("--min-gain", type=float, default=0.03,
                      help="relative gain a move needs (noise tolerance, default 0.03)")
    goal.add_argument("--max-error-rate", type=float, default=0.05)
    goal.add_argument("--validate", type=int, default=0, metavar="N",
                      help="re-run chosen and starting configuration alternately N times each")

    scale = parser.add_argument_group("trials at once (see docs/scale-out.md)")
    scale.add_argument("--parallel", type=int, default=1, metavar="K",
                       help="run up to K trials at once, each with its own server and port "
                            "(default 1; same search, same trials)")
    scale.add_argument("--gpus-per-trial", type=int, default=0, metavar="G",
                       help="give each trial's server G GPUs of its own "
                            "(CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES)")
    scale.add_argument("--gpus", metavar="LIST",
                       help="GPU ids the trials may use, e.g. 0,1,2,3 (default: those visible)")
    scale.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                       help="run the trials as Ray tasks (num_gpus=G) on a cluster (ADDRESS; "
                            "omitted: $RAY_ADDRESS or a local cluster)")

    parser.add_argument("-o", "--output-dir", "--out", dest="out",
                        help="run directory (default ./latscope-runs/tune-TIME)")
    parser.add_argument("--resume", metavar="DIR", help="continue the tune stored in DIR")
    parser.add_argument("--json", action="store_true", help="print tune.json instead of tables")


def _spec(args: argparse.Namespace) -> Any:
    from latscope.analysis.search import parse_param
    from latscope.analysis.tune import TuneSpec
    from latscope.errors import ConfigError

    if bool(args.serve_cmd) == bool(args.local):
        raise ConfigError("give exactly one of --serve-cmd TEMPLATE or --local")
    if not args.param:
        raise ConfigError("give at least one --param NAME=LO..HI")
    params = [parse_param(p) for p in args.param]
    if args.serve_cmd:
        import shlex

        from latscope.redact import redact_cmd
        if redact_cmd(shlex.split(args.serve_cmd)) != shlex.split(args.serve_cmd):
            raise ConfigError("--serve-cmd carries a secret (--api-key, --token, ...): pass it through "
                              "the environment instead (e.g. VLLM_API_KEY), tune.json keeps the command")
    start = None
    if args.start:
        by_name = {p.name: p for p in params}
        start = {p.name: p.values[(len(p.values) - 1) // 2] for p in params}
        for item in args.start:
            name, _, value = item.partition("=")
            name = name.strip().replace("-", "_")
            if name not in by_name:
                raise ConfigError(f"--start {item!r}: no --param named {name}")
            try:
                start[name] = type(by_name[name].values[0])(value)
            except ValueError:
                raise ConfigError(f"--start {item!r}: {value!r} is not a value of type "
                                  f"{type(by_name[name].values[0]).__name__}") from None
    _check_workload(args)
    workload = {k: getattr(args, k) for k in ("per_trial", "concurrency", "rate", "num_requests",
                                              "duration", "warmup", "input_len", "output_len",
                                              "workload", "seed", "scrape_interval", "endpoint",
                                              "model", "tokenizer", "host", "port", "ready_timeout",
                                              "health_path")}
    return TuneSpec(params=params, serve_cmd=args.serve_cmd, local=args.local, slo=args.slo,
                    workload=workload, objective=args.objective, latency=args.latency,
                    strategy=args.search, start=start, min_gain=args.min_gain,
                    max_error_rate=args.max_error_rate)


def _check_workload(args: argparse.Namespace) -> None:
    """Reject flags that would fail only once servers start, after tune.json is written."""
    from latscope.analysis.knee import parse_slo
    from latscope.cli.common import parse_loads as _loads
    from latscope.errors import ConfigError

    parse_slo(args.slo)
    text = args.rate or args.concurrency
    if text and args.per_trial == "sweep":
        _loads(text)
    elif text:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{text!r}: --per-trial fixed takes one number of "
                              "--concurrency or --request-rate (a list needs --per-trial sweep)"
                              ) from None
        if not value > 0:
            raise ConfigError(f"{text!r}: the load must be > 0")
    if not args.scrape_interval > 0:
        raise ConfigError(f"--scrape-interval {args.scrape_interval:g}: must be > 0 seconds")


def _measure(spec: Any, key: str | None) -> Any:
    from latscope.analysis.knee import parse_slo
    from latscope.campaign.tune import fixed_measure, sweep_measure
    from latscope.cli.common import bench_base_config
    from latscope.cli.common import parse_loads as _loads

    w = argparse.Namespace(**spec.workload)
    base = bench_base_config(w, "http://127.0.0.1", w.model)
    base.api_key = key  # from --api-key or the environment; tune.json never holds it
    mode = "rate" if w.rate else "concurrency"
    text = w.rate or w.concurrency or ("auto" if w.per_trial == "sweep" else "16")
    if w.per_trial == "sweep":
        return sweep_measure(base, mode, _loads(text), parse_slo(spec.slo), objective=spec.objective,
                             warmup=w.warmup, scrape_interval_s=w.scrape_interval)
    return fixed_measure(base, mode, float(text), warmup=w.warmup, scrape_interval_s=w.scrape_interval)


def _launch(spec: Any) -> Any:
    from latscope.campaign.tune import local_launcher, serve_cmd_launcher

    w = spec.workload
    if spec.local:
        return local_launcher(ready_timeout=w["ready_timeout"])
    return serve_cmd_launcher(spec.serve_cmd, host=w["host"], port=w["port"],
                              ready_timeout=w["ready_timeout"], model=w["model"] or "",
                              health_path=w.get("health_path", "/health"))


def _pool(args: argparse.Namespace, spec: Any, launch: Any, measure: Any, console: Any) -> Any:
    """How trials run: flags of this invocation, not of the tune (a resume may change them)."""
    from latscope.campaign.parallel_tune import make_pool

    fixed_port = bool(spec.serve_cmd) and "{port}" not in spec.serve_cmd
    pool, notes = make_pool(launch, measure, parallel=args.parallel,
                            gpus_per_trial=args.gpus_per_trial, gpus=args.gpus,
                            ray_address=args.ray or None, use_ray=args.ray is not None,
                            fixed_port=fixed_port)
    for line in notes:
        console.print(f"[yellow]{line}[/yellow]" if line.startswith("warning:") else line)
    return pool


def run(args: argparse.Namespace) -> int:
    import sys

    from latscope.analysis.tune import Tuner, TuneState
    from latscope.cli.common import api_key
    from latscope.errors import ConfigError
    from latscope.report.sweep import trials_table, validation_lines
    from latscope.report.text import make_console
    from latscope.rundir import RunDir

    console = make_console(stderr=args.json)
    if args.resume:
        state = TuneState.load(Path(args.resume))
        spec = state.spec
        console.print(f"resuming {state.path}: {len(state.cache())} finished trial(s) reused")
    else:
        if args.out and (Path(args.out) / "tune.json").exists():
            raise ConfigError(f"{args.out} already holds a tune; continue it with --resume "
                              f"{args.out}")
        spec = _spec(args)
    launch, measure = _launch(spec), _measure(spec, api_key(args))
    pool = _pool(args, spec, launch, measure, console)  # checked before a run directory exists
    if not args.resume:
        out = RunDir.create("tune", args.out).path
        state = TuneState(out, spec)
        state.save()

    def on_trial(trial: Any) -> None:
        cfg = " ".join(f"{k}={v}" for k, v in trial.config.items())
        value = trial.metrics.get(spec.objective)
        where = "".join(f" [{part}]" for part in (trial.devices and f"GPUs {trial.devices}",
                                                   trial.node) if part)
        index = next(i for i, t in enumerate(state.trials) if t is trial)  # finish order varies
        console.print(f"  trial {index} ({trial.purpose}) {cfg}{where}: {trial.status}"
                      + (f", {spec.objective} {value:.3g}, SLO {'met' if trial.feasible else 'missed'}"
                         if value is not None else f" {trial.error}"))

    tuner = Tuner(state, launch, measure, on_trial=on_trial, pool=pool)
    result = tuner.search()
    searched = state.search_trials()
    if searched and not any(t.status == "done" for t in searched):
        # no configuration was measured: there is no "best", only the reason
        first = next((t.error for t in searched if t.error), "")
        print(f"error: every trial failed ({len(searched)}); first: {first}; state: {state.path}",
              file=sys.stderr)
        return 1
    validation = None
    if args.validate and result.best == result.order[0]:
        console.print("validation skipped: the search kept the starting configuration")
    elif args.validate:
        validation = tuner.validate(result.order[0], result.best, args.validate)
    if args.json:
        sys.stdout.write(state.path.read_text())
        return 0
    res = state.result
    assert res is not None  # the search ran to its end: its result is recorded
    console.print(trials_table(state.trials, spec.objective, spec.latency, res.best))
    n_val = sum(t.purpose != "search" for t in state.trials)
    console.print(f"restarts for the search: {res.restarts} ({res.strategy}); full grid: "
                  f"{res.grid_size}; validation runs: {n_val}; servers started this session: "
                  f"{tuner.restarts_this_session}")
    console.print(f"pareto front ({spec.objective} vs {spec.latency}): "
                  + "; ".join(_cfg(c) for c in res.pareto))
    verdict = "meets the SLO" if res.best_feasible else "[red]no configuration met the SLO[/red]"
    value = f"{res.best_value:.4g}" if res.best_value is not None else "-"
    console.print(f"[bold]best: {_cfg(res.best)}[/bold] ({spec.objective} {value}; {verdict}); "
                  f"baseline: {_cfg(res.baseline)}")
    console.print(_single_run_note(state, res))
    if validation:
        for line in validation_lines(validation):
            console.print(line)
    console.print(f"state: {state.path}")
    return 0


def _cfg(config: Config) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def _single_run_note(state: TuneState, res: TuneResult) -> str:
    """How sure the search's pick is without --validate: one run per configuration."""
    spec = state.spec
    by_cfg = {tuple(t.config.items()): t for t in state.search_trials() if t.status == "done"}
    best, base = by_cfg.get(tuple(res.best.items())), by_cfg.get(tuple(res.baseline.items()))
    if best is None or base is None or best is base:
        return "the baseline stayed best: no move beat it by more than --min-gain"
    b, a = best.metrics.get(spec.objective), base.metrics.get(spec.objective)
    if not a or b is None:
        return ""
    return (f"best vs baseline: {spec.objective} {b / a - 1:+.1%} in one run each (moves need "
            f"> {spec.min_gain:.0%}); --validate N gives a confidence interval")
