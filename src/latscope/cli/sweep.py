"""`latscope sweep`: raise the load step by step, find the knee, recommend an operating point.

Each step is one ``latscope bench`` run (its own directory under the sweep's) with ``/metrics``
scraped and the latency decomposed. ``sweep.json`` is rewritten after every step, so Ctrl-C keeps
everything measured. See docs/sweep.md for every flag and number.
"""

from __future__ import annotations

import argparse

from latscope.cli.common import add_api_key_argument

HELP = "raise concurrency or request rate step by step; find the knee and the load to run at"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_argument_group("target")
    where = target.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000")
    where.add_argument("--local", action="store_true",
                       help="start the embedded tiny vLLM for the sweep and stop it afterwards")
    target.add_argument("--model", help="model name (default: the first of /v1/models)")
    add_api_key_argument(target)
    target.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    target.add_argument("--tokenizer", help="local tokenizer dir or tokenizer.json for exact lengths")

    load = parser.add_argument_group("load")
    mode = load.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", "--max-concurrency", dest="concurrency", default=None,
                      help="closed loop: 'auto' (default) or a list, e.g. 1,4,16,64")
    mode.add_argument("--request-rate", dest="rate", default=None,
                      help="open loop (Poisson): 'auto' or a list of requests/s, e.g. 1,2,4")
    load.add_argument("--start", type=float, default=1, help="auto: first load (default 1)")
    load.add_argument("--factor", type=float, default=2.0, help="auto: growth per step (default 2)")
    load.add_argument("--max-load", type=float, default=1024, help="auto: highest load (default 1024)")
    load.add_argument("--refine", type=int, default=2,
                      help="auto: steps bisecting around the knee after growth stops (default 2)")
    load.add_argument("--max-steps", type=int, default=12)
    load.add_argument("--patience", type=int, default=2,
                      help="stop after N steps in a row without >10%% more throughput (default 2)")
    load.add_argument("-n", "--num-requests", type=int, default=None,
                      help="measured requests per step (default: max(32, 4 x load))")
    load.add_argument("--duration", type=float, default=None, help="seconds per step instead of -n")
    load.add_argument("--warmup", type=int, default=None,
                      help="warm-up requests per step (default: one per slot, 2..64)")
    load.add_argument("--input-len", default="96..160", help="prompt tokens: 128, 64..256 or "
                      "128~32 (default 96..160: spread, so that a closed loop is not in lockstep)")
    load.add_argument("--output-len", default="32..96",
                      help="output tokens (same syntax; default 32..96)")
    load.add_argument("--workload", help="TOML/YAML workload file (overrides the lengths)")
    load.add_argument("--seed", type=int, default=0)

    judge = parser.add_argument_group("judgement")
    judge.add_argument("--slo", help="e.g. ttft_p99_ms<=500,itl_p99_ms<=50 (keys of the step metrics)")
    judge.add_argument("--latency-cap", default="e2e_p99_ms<=120000",
                       help="stop once this no longer holds (default e2e_p99_ms<=120000)")
    judge.add_argument("--max-error-rate", type=float, default=0.05)
    judge.add_argument("--knee-latency", default="e2e_p50_ms",
                       help="latency the knee is read on (default e2e_p50_ms; e.g. ttft_p50_ms)")
    judge.add_argument("--backoff", type=float, default=0.10,
                       help="operating point = knee x (1 - backoff) (default 0.10)")
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="/metrics every N s")
    parser.add_argument("-o", "--output-dir", "--out", dest="out",
                        help="run directory (default ./latscope-runs/sweep-TIME)")
    parser.add_argument("--json", action="store_true", help="print sweep.json instead of tables")


def _check_flags(args: argparse.Namespace, loads: list[float] | None, integer: bool) -> None:
    """Flag values that would otherwise fail deep inside a step, or give a nonsense answer."""
    from latscope.errors import ConfigError

    if integer and loads and any(v != int(v) for v in loads):
        raise ConfigError(f"--concurrency {args.concurrency}: concurrency must be whole numbers")
    if integer and not loads and (args.start != int(args.start)
                                   or args.max_load != int(args.max_load)):
        raise ConfigError("--start and --max-load: concurrency must be whole numbers")
    if not 0 <= args.backoff < 1:
        raise ConfigError(f"--backoff {args.backoff:g}: must be in [0, 1)")
    if not args.scrape_interval > 0:
        raise ConfigError(f"--scrape-interval {args.scrape_interval:g}: must be > 0 seconds")
    if args.max_steps < 1:
        raise ConfigError(f"--max-steps {args.max_steps}: must be at least 1")


def run(args: argparse.Namespace) -> int:
    import contextlib
    import re
    import sys

    import orjson

    from latscope.analysis.knee import parse_slo
    from latscope.analysis.sweep import StopRules
    from latscope.analysis.sweepfile import SweepMeta
    from latscope.campaign.sweep import sweep
    from latscope.cli.common import bench_base_config, parse_loads
    from latscope.errors import ConfigError
    from latscope.redact import redact_url_password
    from latscope.report.findings import print_findings
    from latscope.report.sweep import decomposition_table, sweep_table
    from latscope.report.text import make_console
    from latscope.results import to_json_builtins
    from latscope.rundir import RunDir

    console = make_console(stderr=args.json)
    mode = "rate" if args.rate is not None else "concurrency"
    loads = parse_loads(args.rate if mode == "rate" else args.concurrency)
    integer = mode == "concurrency"
    _check_flags(args, loads, integer)
    slo = parse_slo(args.slo)
    if not re.fullmatch(r"(ttft|itl|tpot|e2e)_(p[0-9.]+|mean|min|max)_ms", args.knee_latency):
        raise ConfigError(f"--knee-latency {args.knee_latency!r}: use e.g. e2e_p50_ms or ttft_p99_ms")
    cap = parse_slo(args.latency_cap)
    rules = StopRules(max_error_rate=args.max_error_rate, latency_cap=cap[0] if cap else None,
                      max_load=args.max_load, max_steps=args.max_steps, patience=args.patience)
    unit = "concurrency" if integer else "request rate"
    run_dir = RunDir.create("sweep", args.out, target={"url": redact_url_password(args.url)
                                                         if args.url else "local"})
    out = run_dir.path

    with contextlib.ExitStack() as stack:
        url, model = args.url, args.model
        if args.local:
            from latscope.server.target import LocalTarget
            console.print("starting the local vLLM target ...")
            target = stack.enter_context(LocalTarget(log_dir=out))
            url, model = target.url, target.model_name
        base = bench_base_config(args, url, model)
        meta = SweepMeta(url=redact_url_password(url) if url else url, mode=mode,
                         loads=loads or "auto", slo=args.slo, latency_cap=args.latency_cap,
                         backoff=args.backoff, bench=base.public_dict())

        def on_step(step):
            console.print(f"  {unit} {step.load:g}: {step.metrics.get('requests_per_s') or 0:.2f}"
                          f" req/s, E2E p50 {step.metrics.get('e2e_p50_ms') or 0:.0f} ms"
                          + (f"  stop: {step.stop_reason}" if step.stop_reason else ""))

        per_step = None if args.num_requests or args.duration else (
            lambda load: max(32, int(4 * load)))
        result = sweep(base, mode, loads, out, slo=slo, rules=rules, start=args.start,
                       factor=args.factor, refine=args.refine, backoff=args.backoff,
                       latency=args.knee_latency, warmup=args.warmup,
                       scrape_interval_s=args.scrape_interval, per_step_requests=per_step,
                       meta=meta, on_step=on_step)
    steps, analysis, findings = result.steps, result.analysis, result.findings
    run_dir.write_findings(findings)
    run_dir.finish("ok")
    if args.json:
        sys.stdout.write(orjson.dumps(to_json_builtins(result.document),
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    console.print(sweep_table(steps, analysis, unit))
    if (decomposition := decomposition_table(steps, unit)) is not None:
        console.print(decomposition)
    print_findings(findings, console, title="Sweep")
    if analysis.recommended is not None:
        pred = analysis.predicted or {}
        extra = (f" (interpolated: {pred['requests_per_s']:.2f} req/s, {args.knee_latency} "
                 f"{pred[args.knee_latency]:.0f} ms)" if pred else "")
        console.print(f"[bold]recommended {unit}: {analysis.recommended:g}[/bold]{extra}")
    console.print(f"results: {out / 'sweep.json'}")
    return 0
