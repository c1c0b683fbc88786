#!/usr/bin/env python3
"""A local fleet to look at, or to record Prometheus' answers from: real vLLM CPU replicas,
Debian's Prometheus scraping them every second and Debian's nginx balancing them round robin,
all on 127.0.0.1, traffic from vLLM's own ``vllm bench serve`` (tests/independent_traffic.py).

    python3 scripts/fleet_lab.py up            # 3 replicas (one --max-num-seqs 1), traffic,
                                               # then waits: run `latscope diagnose --prometheus`
    python3 scripts/fleet_lab.py record DIR    # the scenarios of tests/data/prometheus/

``record`` saves every answer Prometheus gave to ``latscope.fleet.window.read_window`` for each
scenario (balanced pair, slow replica, restart with another KV size, a replica gone, faults) as
``DIR/<scenario>.json.gz``, which tests/unit/fleet replays. Everything started here is stopped by
its own process group at the end, Ctrl-C included. Run it under the shared lock:
``flock /tmp/latscope-heavy.lock python3 scripts/fleet_lab.py ...``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from fleet_parts import NginxBalancer, PrometheusServer  # noqa: E402
from independent_traffic import BenchServeTraffic  # noqa: E402
from latscope.fleet import prometheus  # noqa: E402
from latscope.fleet.window import WindowSpec, read_window  # noqa: E402
from latscope.server.target import LocalTarget, free_port  # noqa: E402

TOKEN = "fleet-lab-token"
SLOW_ARGS = ("--max-num-seqs", "1")


def start_replicas(specs: list[tuple[int, tuple[str, ...], dict[str, str]]],
                   stack: ExitStack) -> list[LocalTarget]:
    """Start the replicas side by side (each start is ~30-60 s of a 2-core box)."""
    targets = [LocalTarget(port=port, serve_args=args, env=env) for port, args, env in specs]
    errors: list[BaseException] = []

    def start(t: LocalTarget) -> None:
        try:
            t.start()
        except BaseException as exc:  # reported below, after every start returned
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(t,)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for t in targets:
        stack.callback(t.stop)
    if errors:
        raise errors[0]
    return targets


def traffic(url: str, target: LocalTarget, *, prompts: int, rate: float) -> dict[str, Any]:
    run = BenchServeTraffic(url, model=target.model_name, tokenizer=target.tokenizer_dir or "",
                            num_prompts=prompts, rate=rate)
    with run:
        result = run.wait(timeout_s=300)
    print(f"  traffic: {result.get('completed')} of {prompts} completed, mean TTFT "
          f"{result.get('mean_ttft_ms', 0):.0f} ms", flush=True)
    return result


class Recorder:
    """Every GET the fleet window makes, with Prometheus' answer, kept in order."""

    def __init__(self) -> None:
        self.exchanges: list[dict[str, Any]] = []
        original = prometheus.Session._data

        def data(session: Any, path: str, params: dict[str, str], status: int,
                 body: bytes) -> Any:
            self.exchanges.append({"path": path, "params": params, "status": status,
                                   "body": body.decode()})
            return original(session, path, params, status, body)

        prometheus.Session._data = data  # type: ignore[method-assign]


def record(name: str, out: Path, recorder: Recorder, url: str, spec: WindowSpec,
           token: str | None = None) -> None:
    recorder.exchanges.clear()
    error = None
    try:
        window = read_window(prometheus.PrometheusClient(url, token=token), spec)
        print(f"  {name}: {len(window.replicas)} replicas, step {window.step:g} s, "
              f"{sum(len(r.snapshots) for r in window.replicas)} snapshots", flush=True)
    except Exception as exc:  # a fault scenario: its one line is part of the record
        error = f"{type(exc).__name__}: {exc}"
        print(f"  {name}: {error}", flush=True)
    doc = {"spec": {"start": spec.start, "end": spec.end, "step": spec.step,
                    "selector": spec.selector, "replica_labels": list(spec.replica_labels)},
           "error": error, "exchanges": recorder.exchanges}
    (out / f"{name}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))


def _window(t0: float, t1: float, selector: str = 'job="vllm"',
            labels: tuple[str, ...] = ("instance",)) -> WindowSpec:
    return WindowSpec(start=round(t0 - 2), end=round(t1 + 3), step=None, selector=selector,
                      replica_labels=labels)


def run_record(out: Path, only_late: bool = False) -> None:
    out.mkdir(parents=True, exist_ok=True)
    recorder = Recorder()
    ports = [free_port() for _ in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    with ExitStack() as stack:
        reps = start_replicas([(ports[0], (), {}), (ports[1], (), {}),
                               (ports[2], SLOW_ARGS, {})], stack)
        prom = stack.enter_context(PrometheusServer(addrs, interval_s=1))
        lb_all = stack.enter_context(NginxBalancer(addrs, auth_front=(prom.url, TOKEN)))
        lb_pair = stack.enter_context(NginxBalancer(addrs[:2]))
        prom.scraped()
        if only_late:
            _restart_and_gone(out, recorder, prom, lb_all, reps, ports)
            return
        print("balanced pair", flush=True)
        t0 = time.time()
        traffic(lb_pair.url, reps[0], prompts=40, rate=4)
        pair = f'job="vllm", instance=~"{addrs[0]}|{addrs[1]}"'
        time.sleep(4)
        record("balanced_pair", out, recorder, prom.url, _window(t0, time.time(), pair))
        print("slow replica", flush=True)
        t0 = time.time()
        traffic(lb_all.url, reps[0], prompts=90, rate=6)
        time.sleep(4)
        slow = _window(t0, time.time())
        record("slow_replica", out, recorder, prom.url, slow)
        record("auth_refused", out, recorder, lb_all.auth_url or "", slow)
        record("auth_token", out, recorder, lb_all.auth_url or "", slow, token=TOKEN)
        record("bad_selector", out, recorder, prom.url, _window(t0, time.time(), 'job=~"('))
        record("no_match", out, recorder, prom.url, _window(t0, time.time(), 'job="nope"'))
        record("model_label", out, recorder, prom.url,
               _window(t0, time.time(), labels=("model_name",)))
        _restart_and_gone(out, recorder, prom, lb_all, reps, ports)


def _restart_and_gone(out: Path, recorder: Recorder, prom: PrometheusServer,
                      lb_all: NginxBalancer, reps: list[LocalTarget], ports: list[int]) -> None:
    print("restart with another KV cache size", flush=True)
    t0 = time.time()
    run = BenchServeTraffic(lb_all.url, model=reps[0].model_name,
                            tokenizer=reps[0].tokenizer_dir or "", num_prompts=60, rate=4)
    with run:
        _wait_served(reps[1], 5)  # its counters must hold something to reset
        reps[1].stop()
        _wait_port_free(ports[1])
        reps[1] = LocalTarget(port=ports[1], env={"VLLM_CPU_KVCACHE_SPACE": "2"})
        reps[1].start()
        try:
            run.wait(timeout_s=300)
        except RuntimeError as exc:  # requests to the stopped replica may fail: expected
            print(f"  traffic: {str(exc)[:200]}", flush=True)
    traffic(lb_all.url, reps[0], prompts=40, rate=4)
    time.sleep(4)
    record("restart", out, recorder, prom.url, _window(t0, time.time()))
    _stall(out, recorder, prom, lb_all, reps)
    print("a replica gone mid-window", flush=True)
    t0 = time.time()
    run = BenchServeTraffic(lb_all.url, model=reps[0].model_name,
                            tokenizer=reps[0].tokenizer_dir or "", num_prompts=60, rate=4)
    with run:
        _wait_served(reps[2], 3)  # gone after it served some of the traffic
        reps[2].stop()
        try:
            run.wait(timeout_s=300)
        except RuntimeError as exc:  # requests to the stopped replica may fail: expected
            print(f"  traffic: {str(exc)[:200]}", flush=True)
    time.sleep(6)
    record("replica_gone", out, recorder, prom.url, _window(t0, time.time()))
    reps[1].stop()


def _stall(out: Path, recorder: Recorder, prom: PrometheusServer, lb_all: NginxBalancer,
           reps: list[LocalTarget]) -> None:
    """A real stall: the first replica's engine core stopped (SIGSTOP) for 20 s under traffic,
    its API server still answering /metrics with the requests it holds, then resumed."""
    print("a stalled engine", flush=True)
    t0 = time.time()
    run = BenchServeTraffic(lb_all.url, model=reps[0].model_name,
                            tokenizer=reps[0].tokenizer_dir or "", num_prompts=60, rate=4)
    with run:
        _wait_served(reps[0], 3)
        cores = _engine_cores(reps[0].pid or 0)
        for pid in cores:
            os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(20)
        finally:
            for pid in cores:
                os.kill(pid, signal.SIGCONT)
        run.wait(timeout_s=300)
    time.sleep(4)
    record("stall", out, recorder, prom.url, _window(t0, time.time()))


def _engine_cores(api_pid: int) -> list[int]:
    """The engine-core processes a replica's API server started (its children so named)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            comm = (proc / "comm").read_text().strip()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == api_pid and "EngineCor" in comm:
            found.append(int(proc.name))
    if not found:
        raise RuntimeError(f"no engine core under pid {api_pid}")
    return found


def _wait_served(target: LocalTarget, more: int, timeout_s: float = 180.0) -> None:
    """Until the replica's own counter says it finished ``more`` requests from now."""
    deadline = time.monotonic() + timeout_s
    start = _served(target)
    while time.monotonic() < deadline:
        if _served(target) >= start + more:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{target.url} did not finish {more} requests in {timeout_s:g} s")


def _served(target: LocalTarget) -> float:
    import urllib.request

    from latscope.server.metrics import parse_metrics_text

    with urllib.request.urlopen(target.url + "/metrics", timeout=10) as resp:
        page = parse_metrics_text(resp.read().decode())
    return page.value("vllm:request_success_total") or 0.0


def _wait_port_free(port: int, timeout_s: float = 120.0) -> None:
    """A stopped replica's port stays bound while its connections sit in TIME_WAIT (the
    balancer kept some alive): the same port is what Prometheus scrapes, so wait for it."""
    from latscope.server.target import port_is_free

    deadline = time.monotonic() + timeout_s
    while not port_is_free(port) and time.monotonic() < deadline:
        time.sleep(1)


def run_up() -> None:
    ports = [free_port() for _ in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    with ExitStack() as stack:
        reps = start_replicas([(ports[0], (), {}), (ports[1], (), {}),
                               (ports[2], SLOW_ARGS, {})], stack)
        prom = stack.enter_context(PrometheusServer(addrs, interval_s=1))
        lb = stack.enter_context(NginxBalancer(addrs))
        prom.scraped()
        print(f"replicas {', '.join(addrs)} (the last: {' '.join(SLOW_ARGS)})\n"
              f"prometheus {prom.url}\nnginx {lb.url}", flush=True)
        t0 = time.time()
        traffic(lb.url, reps[0], prompts=90, rate=6)
        print(f"window: --start {int(t0) - 2} --end {int(time.time()) + 3}", flush=True)
        print("Ctrl-C stops everything", flush=True)
        while True:
            time.sleep(3600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("up")
    rec = sub.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--late-only", action="store_true",
                     help="only the restart and replica-gone scenarios")
    args = parser.parse_args()

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # started in the background by a script, SIGINT comes ignored: restore it, and let SIGTERM
    # stop everything this script started the same way (each by its own process group)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, stop)
    try:
        run_up() if args.what == "up" else run_record(args.out, args.late_only)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)


if __name__ == "__main__":
    main()
