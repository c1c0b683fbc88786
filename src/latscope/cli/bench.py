"""`latscope bench`: send load to an OpenAI-compatible server and measure it honestly.

Without ``--url`` it starts the embedded local vLLM (tiny model) and stops it afterwards. Flags
that mean what ``vllm bench serve`` means also accept its names (``--max-concurrency``,
``--request-rate``, ``--num-prompts``, ``--random-input-len``, ``--random-output-len``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Any

HELP = "send load to an OpenAI-compatible server; print TTFT/ITL/TPOT/E2E, throughput, goodput"

# Defaults for the embedded tiny vLLM: about a minute on 2 CPU cores.
LOCAL_DEFAULTS: dict[str, Any] = {"num_requests": 64, "concurrency": 8, "input_len": "128",
                                  "output_len": "64"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``latscope bench``'s flags, one argument group (as ``--help`` shows them) a function."""
    _target_arguments(parser)
    _workload_arguments(parser)
    _load_shape_arguments(parser)
    _output_arguments(parser)
    _span_arguments(parser)


def _target_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the requests go and how they are sent."""
    target = parser.add_argument_group("target")
    target.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000 "
                        "(omitted: start the embedded local vLLM)")
    target.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    target.add_argument("--model", help="model name (default: the first of GET /v1/models)")
    target.add_argument("--api-key", help="API key (default: $LATSCOPE_API_KEY or "
                        "$OPENAI_API_KEY); never printed or written")
    target.add_argument("--no-stream", action="store_true", help="non-streaming requests")
    target.add_argument("--timeout", type=float, default=600.0, help="per-request timeout (s)")
    target.add_argument("--per-chunk-usage", action="store_true",
                        help="ask vLLM for usage in every chunk (tokens per chunk)")
    target.add_argument("--extra-body", help="JSON object merged into every request body")
    target.add_argument("--replica", action="append", default=[], metavar="URL",
                        help="a replica behind --url (a balancer): its /metrics is scraped "
                        "instead of --url's, and the client's TTFT is set beside the "
                        "replicas' own (repeat it for each; docs/fleet.md)")
    target.add_argument("--priority-by", choices=("cost",), default=None,
                        help="set vLLM's `priority` from each request's prompt tokens + "
                        "max_tokens (its power-of-two bucket, lower first; needs a server "
                        "started with --scheduling-policy priority)")


def _workload_arguments(parser: argparse.ArgumentParser) -> None:
    """What each request asks for: prompt and output lengths, mixes, datasets, prefixes."""
    work = parser.add_argument_group("workload")
    work.add_argument("--input-len", "--random-input-len", default=None,
                      help="prompt tokens: 128, 64..256 (uniform) or 128~32 (normal)")
    work.add_argument("--output-len", "--random-output-len", default=None,
                      help="output tokens (max_tokens), same syntax")
    work.add_argument("--mix", help="named mix NAME:WEIGHT:IN:OUT,... e.g. "
                      "short:0.9:128:64,long:0.1:2048:256")
    work.add_argument("--workload", help="TOML/YAML workload file (keys as the flags; mix list)")
    work.add_argument("--dataset", help="ShareGPT JSON or JSONL ({\"prompt\": ..., "
                      "\"output_len\": ...}) file")
    work.add_argument("--dataset-format", choices=("auto", "sharegpt", "jsonl"), default="auto")
    work.add_argument("--prefix-len", type=int, default=0, help="shared-prefix length (tokens)")
    work.add_argument("--prefix-fraction", type=float, default=None,
                      help="share of prompts that carry the shared prefix (default 1.0 "
                      "when --prefix-len is set)")
    work.add_argument("--no-ignore-eos", action="store_true",
                      help="let the model stop early (default: ignore_eos, exact output lengths)")
    work.add_argument("--tokenizer", help="HF tokenizer dir or tokenizer.json for exact counts "
                      "(default: the server's /tokenize, else approximate)")
    work.add_argument("--seed", type=int, default=0)


def _load_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """The load shape: closed or open loop, how many requests, and the client processes."""
    load = parser.add_argument_group("load")
    load.add_argument("-c", "--concurrency", "--max-concurrency", type=int, default=None,
                      help="closed loop: requests in flight (with --rate: a cap)")
    load.add_argument("--rate", "--request-rate", type=float, default=None,
                      help="open loop: requests/s (Poisson unless --burstiness)")
    load.add_argument("--burstiness", type=float, default=1.0,
                      help="gamma shape of inter-arrival gaps (1 = Poisson, <1 burstier)")
    load.add_argument("-n", "--num-requests", "--num-prompts", type=int, default=None)
    load.add_argument("--duration", type=float, default=None, help="run for this many seconds")
    load.add_argument("--warmup", type=int, default=0, help="warm-up requests (not measured)")
    load.add_argument("--no-stagger", action="store_true",
                      help="closed loop: send every slot's first request at once (a burst), not "
                      "spread over one request time")
    load.add_argument("--workers", default="auto", metavar="N|auto",
                      help="split the load over N client processes, one event loop each "
                      "(default auto: one per 256 slots or 1000 req/s, at most the spare "
                      "cores; 1 forces one process); with --ray, N Ray actors")
    load.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                      help="run the workers as Ray actors (ADDRESS of a cluster, e.g. "
                      "10.0.0.1:6379; omitted: $RAY_ADDRESS or a local cluster)")


def _output_arguments(parser: argparse.ArgumentParser) -> None:
    """What is measured beside the requests and where it is written."""
    out = parser.add_argument_group("output")
    out.add_argument("--slo", help="goodput SLOs in ms, e.g. ttft=200,tpot=50,e2e=5000")
    out.add_argument("--percentiles", default="50,90,95,99", help="e.g. 50,90,99,99.9")
    out.add_argument("--output-dir", help="run directory (default: ./latscope-runs/bench-TIME)")
    out.add_argument("--no-progress", action="store_true", help="no live progress bar")
    out.add_argument("--no-uvloop", action="store_true", help="use asyncio's default loop")
    out.add_argument("--scrape-interval", type=float, default=2.0,
                     help="scrape /metrics every S seconds during the run (0: off)")
    out.add_argument("--gpu-telemetry", action=argparse.BooleanOptionalAction, default=None,
                     help="sample the GPUs (NVML, amdsmi) beside the scrapes (default: on when "
                     "the server is on this host; docs/telemetry.md)")


def _span_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's per-request spans, joined to the client's records."""
    trace = parser.add_argument_group("per-request server spans (OTLP)")
    trace.add_argument("--trace-requests", action=argparse.BooleanOptionalAction, default=None,
                       help="send a fresh W3C traceparent per request (default: on against "
                       "the local target or with --otlp-listen)")
    trace.add_argument("--otlp-listen", metavar="HOST:PORT",
                       help="receive the server's OTLP/HTTP spans here and join them to the "
                       "requests (local target: a free loopback port)")
    trace.add_argument("--otlp-grpc-listen", metavar="HOST:PORT",
                       help="also receive OTLP/gRPC (vLLM's default protocol) here")

def run(args: argparse.Namespace) -> int:
    import sys

    from rich.console import Console

    from latscope.load.runner import RunInterrupted, run_failure
    from latscope.report.bench import print_bench
    from latscope.rundir import default_run_dir
    from latscope.runfiles import summary_of

    console = Console()
    if args.replica and not args.url:
        from latscope.errors import ConfigError

        raise ConfigError("--replica needs --url BALANCER: the load goes through it")
    with contextlib.ExitStack() as stack:
        collector = _collector(args, console, stack)
        url, tokenizer_dir = stack.enter_context(_target(args, console, collector))
        config = build_config(args, url, tokenizer_dir)
        config.trace_requests = (args.trace_requests if args.trace_requests is not None
                                 else collector is not None)
        if config.output_dir is None:  # named up front, so Ctrl-C users know where results are
            config.output_dir = default_run_dir()
        console.print(f"[dim]writing to {config.output_dir}[/dim]")
        observers = _observers(args, url)
        recorder = _recorder(collector)
        try:
            with _Progress(console, config, enabled=not args.no_progress) as progress:
                watchers = observers + ([recorder] if recorder else [])
                on_record = _on_record(progress, recorder)
                if args.ray is None:
                    from latscope.load.workers import run_load
                    result = run_load(config, _workers_arg(args.workers), watchers,
                                      on_record=on_record)
                else:
                    result = _run_workers(args, config, watchers, on_record)
        except RunInterrupted as exc:  # SIGTERM: handled as Ctrl-C, with its own exit status
            print(f"stopped by {exc}: finished requests, the in-flight ones as cancelled and "
                  f"the summary are in {config.output_dir}", file=sys.stderr)
            return 128 + exc.signum
    print_bench(summary_of(result.summary), console)
    console.print(f"run directory: {result.run_dir}")
    if args.replica and observers:
        _print_fleet(result, args.replica)
    elif observers or recorder:
        _print_decomposition(result, console)
    for failure in result.summary.get("workers_failed", []):
        console.print(f"[bold red]error:[/bold red] {failure}; its finished records are kept")
    failure = run_failure(result.summary)
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    return 1 if result.summary.get("workers_failed") else 0


def _workers_arg(text: str) -> int | str:
    from latscope.errors import ConfigError

    if text == "auto":
        return text
    try:
        workers = int(text)
    except ValueError:
        raise ConfigError(f"--workers {text!r}: give a number or auto") from None
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    return workers


def _run_workers(args: argparse.Namespace, config: Any, observers: list[Any],
                 on_record: Any) -> Any:
    from latscope.errors import ConfigError
    from latscope.load.workers import run_workers

    if args.workers == "auto":  # with --ray: one actor per alive node
        workers = None
    else:
        try:
            workers = int(args.workers)
        except ValueError:
            raise ConfigError(f"--workers {args.workers!r}: give a number or auto") from None
        if workers < 1:
            raise ConfigError("--workers must be at least 1")
    return run_workers(config, workers, backend="local" if args.ray is None else "ray",
                       ray_address=args.ray or None, observers=observers, on_record=on_record)


def _collector(args: argparse.Namespace, console: Any, stack: contextlib.ExitStack) -> Any:
    """The OTLP receiver, started before the server so that its address can be passed to it."""
    listen = args.otlp_listen or (None if args.url else "127.0.0.1:0")
    recorded = False
    if listen is None and args.url:  # the background target (`target up`) exports there
        from latscope.server.target import recorded_otlp_listen

        listen = recorded_otlp_listen(args.url)
        recorded = listen is not None
    if listen is None or args.trace_requests is False:
        return None
    from latscope.server.otlp import SpanCollector, remote_instructions

    collector = stack.enter_context(SpanCollector(listen, grpc_listen=args.otlp_grpc_listen))
    console.print(f"[dim]OTLP receiver at {collector.http_endpoint}"
                  f"{' (the background target exports there)' if recorded else ''}[/dim]")
    if args.url and not recorded:
        for line in remote_instructions(collector):
            console.print(f"[dim]{line}[/dim]")
    return collector


def _recorder(collector: Any) -> Any:
    if collector is None:
        return None
    from latscope.server.otlp_record import SpanRecorder

    return SpanRecorder(collector)


def _on_record(progress: Any, recorder: Any) -> Any:
    if recorder is None:
        return progress.on_record

    def on_record(record: Any) -> None:
        if record.ok and not record.warmup:  # its span is awaited before the run's file closes
            recorder.expect(record.trace_id)
        progress.on_record(record)

    return on_record


def build_config(args: argparse.Namespace, url: str, tokenizer_dir: str | None) -> Any:
    from pathlib import Path

    from latscope.errors import ConfigError
    from latscope.load import BenchConfig, WorkloadSpec
    from latscope.load.config import load_workload_file, parse_mix, parse_slo

    local = not args.url
    workload = WorkloadSpec(input_len=args.input_len or LOCAL_DEFAULTS["input_len"],
                            output_len=args.output_len or LOCAL_DEFAULTS["output_len"],
                            dataset=args.dataset, dataset_format=args.dataset_format,
                            prefix_len=args.prefix_len, ignore_eos=not args.no_ignore_eos)
    if args.workload:
        for key, value in load_workload_file(args.workload).items():
            setattr(workload, key, value)
    if args.mix:
        workload.mix = parse_mix(args.mix)
    if args.prefix_fraction is not None:
        workload.prefix_fraction = args.prefix_fraction
    elif workload.prefix_len and not workload.prefix_fraction:
        workload.prefix_fraction = 1.0
    try:
        percentiles = tuple(float(p) for p in args.percentiles.split(","))
    except ValueError:
        raise ConfigError(f"bad --percentiles {args.percentiles!r}: use e.g. 50,90,99") from None
    num = args.num_requests
    if num is None and args.duration is None:
        num = LOCAL_DEFAULTS["num_requests"] if local else 100
    concurrency = args.concurrency
    if concurrency is None and args.rate is None:
        concurrency = LOCAL_DEFAULTS["concurrency"]
    return BenchConfig(
        url=url, endpoint=args.endpoint, model=args.model,
        api_key=args.api_key or os.environ.get("LATSCOPE_API_KEY")
        or os.environ.get("OPENAI_API_KEY"),
        stream=not args.no_stream, workload=workload, concurrency=concurrency, rate=args.rate,
        burstiness=args.burstiness, num_requests=num, duration_s=args.duration,
        warmup=args.warmup, seed=args.seed, stagger=not args.no_stagger, slo=parse_slo(args.slo),
        percentiles=percentiles,
        output_dir=Path(args.output_dir) if args.output_dir else None,
        request_timeout_s=args.timeout, tokenizer=args.tokenizer or tokenizer_dir,
        use_uvloop=not args.no_uvloop, per_chunk_usage=args.per_chunk_usage,
        extra_body=_extra_body(args.extra_body), priority_by=args.priority_by)


def _extra_body(text: str | None) -> dict[str, Any]:
    import json

    from latscope.errors import ConfigError

    if not text:
        return {}
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--extra-body is not JSON: {exc.msg}") from None
    if not isinstance(body, dict):
        raise ConfigError("--extra-body must be a JSON object")
    return body


@contextlib.contextmanager
def _target(args: argparse.Namespace, console: Any, collector: Any = None):
    if args.url:
        yield args.url, None
        return
    from latscope.server.target import LocalTarget

    console.print("[dim]no --url: starting the embedded local vLLM (tiny model)...[/dim]")
    endpoint = collector.http_endpoint if collector is not None else None
    with LocalTarget(otlp_endpoint=endpoint) as target:
        console.print(f"[dim]vLLM ready at {target.url} (log: {target.log_path})[/dim]")
        tokenizer = getattr(target, "tokenizer_dir", None)
        yield target.url, str(tokenizer) if tokenizer else None


def _observers(args: argparse.Namespace, url: str) -> list[Any]:
    if not args.scrape_interval or args.scrape_interval <= 0:
        return []
    from latscope.campaign.observe import gpu_sampler
    from latscope.env.hostload import HostLoadSampler
    from latscope.server.scrape import MetricsScraper

    if args.replica:  # a balancer's /metrics would be any replica's: each replica's own
        from latscope.fleet.replicas import ReplicaScrapers

        return [ReplicaScrapers(args.replica, args.scrape_interval)]

    # the host's CPUs over the run (host/cpu.json): a run on a host busy with other work is
    # named as such, and `latscope compare` will not hold it against a run on a quiet one
    return [MetricsScraper(interval_s=args.scrape_interval),
            *gpu_sampler(url, args.scrape_interval, args.gpu_telemetry, None),
            HostLoadSampler(_local_server_pids(url))]


def _local_server_pids(url: str) -> set[int]:
    """The pid listening on the server's port, when the server is on this host (its CPU is
    then the server's, not another process's)."""
    from latscope.env.serverfacts import is_local
    from latscope.server.hostview import HostView, find_listening_pid, url_port

    port = url_port(url)
    pid = find_listening_pid(HostView(), port) if is_local(url) and port else None
    return {pid} if pid else set()


def _print_fleet(result: Any, replicas: list[str]) -> None:
    from latscope.campaign.fleetload import bench_fleet_report
    from latscope.report.fleet import print_fleet_report, typed_fleet_report

    print_fleet_report(typed_fleet_report(bench_fleet_report(result, replicas)))


def _print_decomposition(result: Any, console: Any) -> None:
    from latscope.campaign.observe import observation_of
    from latscope.report.observe import print_decomposition
    from latscope.report.perrequest import print_per_request

    obs = observation_of(result, scraped=True)
    if obs.decomposition is None:
        return
    print_decomposition(obs.decomposition, console)
    if obs.decomposition.split is not None:
        print_per_request(obs.decomposition.split, console)
    if obs.prefix_cache_hit_rate is not None:
        console.print(f"prefix-cache hit rate over the run: {obs.prefix_cache_hit_rate:.1%} "
                      "(compare runs only with alike rates)")


class _Progress:
    """A rich progress bar: done/total, req/s and p50 TTFT of the last 1024 requests
    (recomputed at most 4 times/s; a bounded window, so a long run does not grow it)."""

    def __init__(self, console: Any, config: Any, enabled: bool) -> None:
        from collections import deque

        self.console, self.enabled = console, enabled
        self.total = (config.num_requests + config.warmup) if config.num_requests else None
        self.ttfts: deque[float] = deque(maxlen=1024)
        self.done = 0
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("bench"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[rate]} req/s  p50 TTFT {task.fields[ttft]}"),
                                TimeElapsedColumn(), console=self.console, transient=True,
                                refresh_per_second=2)
            self.bar.start()
            self.task = self.bar.add_task("bench", total=self.total, rate="-", ttft="-")
        return self

    def on_record(self, record: Any) -> None:
        if not self.enabled:
            return
        self.done += 1
        if record.ok and record.first_token_ns is not None and not record.warmup:
            from latscope.stats import ttft_ms

            self.ttfts.append(ttft_ms(record) or 0.0)  # not None: the first token came
        now = time.perf_counter()
        if now - self.last < 0.25 and self.done != self.total:
            return
        self.last = now
        import statistics

        ttft = f"{statistics.median(self.ttfts):.1f} ms" if self.ttfts else "-"
        rate = f"{self.done / (now - self.t0):.1f}"
        self.bar.update(self.task, completed=self.done, rate=rate, ttft=ttft)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()
