"""bench --workers scaling: streamed tokens/s and TTFT error against a fast multi-process local
server, for each worker count and concurrency.

The server is tests/fakeserver.py run as ``--server-procs`` processes sharing one port
(SO_REUSEPORT), so that it is not the limit. Each stream gets its first token ``--ttft-ms`` after
the request reached the host and then one every ``--itl-ms``: the server's schedule bounds the
tokens/s any client can see (``ideal`` below); ``of ideal`` is the share of it reached, and
``scaling`` is tokens/s over (workers x the one-worker tokens/s at the same concurrency) where
one worker already is the limit. TTFT error = measured TTFT - ``--ttft-ms`` (p50/p99): it
includes the fake server's own lateness under load, so it is an upper bound on the client's.

    python3 benchmarks/bench_workers.py                       # here: 1, 2 workers
    python3 benchmarks/bench_workers.py --workers 1,4,8,16 --concurrency 256,1024,4096 \
        --server-procs 8 --requests-per-slot 4               # a 16-core host

``--ttft-ms 0 --itl-ms 0`` makes the server write each response in one write (its schedule no
longer bounds anything, so ``of ideal`` is not printed): the client is then the limit, and
``scaling`` is the ≥ 0.8·N question of one worker's ceiling. ``--server-cpus 12-15`` pins the
server processes and ``--client-cpus 0-11`` latscope (its worker processes inherit the mask), so
N workers on N cores are measured without the server taking their cores; the server's CPU share
over each point is printed so that a saturated server is seen, not read as the client's limit.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src")]

from latscope.load import BenchConfig, run_bench  # noqa: E402
from latscope.load.workers import run_workers  # noqa: E402


def cpu_list(text: str | None) -> set[int] | None:
    """``0-11`` or ``0,2,4-7`` as a set of CPU numbers (None: no pinning)."""
    if not text:
        return None
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def proc_cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _c_server(folder: Path, tokens: int) -> list[str]:
    """benchmarks/fastserver.c built into ``folder``, with its canned response: the stream
    tests/fakeserver.py writes for a zero-delay completions request of ``tokens`` tokens."""
    sys.path.insert(0, str(REPO / "tests"))
    import fakeserver

    response = folder / "response.bin"
    response.write_bytes(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n"
                         + fakeserver._whole_stream(False, tokens, 16, True, False))
    binary = folder / "fastserver"
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        raise SystemExit("--server c builds benchmarks/fastserver.c and needs a C compiler "
                         "(cc, or $CC); none found: use the default --server python")
    built = subprocess.run([compiler, "-O2", "-pthread", "-o", str(binary),
                            str(REPO / "benchmarks" / "fastserver.c")],
                           capture_output=True, text=True)
    if built.returncode:
        raise SystemExit(f"benchmarks/fastserver.c did not build: {built.stderr.strip()[-500:]}")
    return [str(binary), "{port}", "{procs}", str(response)]


@contextlib.contextmanager
def fast_server(procs: int, ttft_ms: float, itl_ms: float, cpus: set[int] | None = None,
                kind: str = "python", tokens: int = 64):
    """``procs`` fakeserver processes on one port, or (``kind`` c) fastserver.c with ``procs``
    threads, zero-delay only."""
    port = _free_port()
    started = []
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if kind == "c":
                command = [part.format(port=port, procs=procs)
                           for part in _c_server(Path(tmp), tokens)]
                commands = [command]
            else:
                commands = [[sys.executable, str(REPO / "tests" / "fakeserver.py"), "--port",
                             str(port), "--reuse-port", "--ttft-ms", str(ttft_ms), "--itl-ms",
                             str(itl_ms)]] * procs
            for command in commands:
                p = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, preexec_fn=pin)
                started.append(p)
                assert p.stdout is not None and p.stdout.readline().startswith("PORT")
            yield f"http://127.0.0.1:{port}", [p.pid for p in started]
        finally:
            for p in started:  # only the processes this script started, by PID
                p.send_signal(signal.SIGTERM)
            for p in started:
                p.wait(timeout=10)


def _driver_moves_when_started(workers: int, cpus: set[int] | None) -> threading.Thread | None:
    """With --driver-cpus: once the worker processes exist (they inherit the mask they were
    spawned with, --client-cpus), the driver's main thread, and the threads it starts after
    (one per worker, reading its records), move to ``cpus``: the workers' cores are theirs."""
    if not cpus:
        return None

    def move() -> None:
        deadline = time.monotonic() + 120
        while len(multiprocessing.active_children()) < workers and time.monotonic() < deadline:
            time.sleep(0.01)
        os.sched_setaffinity(os.getpid(), cpus)  # the main thread's (its tid is the pid)

    thread = threading.Thread(target=move, daemon=True)
    thread.start()
    return thread


def one_point(url: str, workers: int, concurrency: int, args: argparse.Namespace,
              out_dir: Path, server_pids: list[int]) -> dict:
    n = concurrency * args.requests_per_slot
    config = BenchConfig(url=url, model="fake-model", num_requests=n, concurrency=concurrency,
                         warmup=concurrency, output_dir=out_dir / f"w{workers}-c{concurrency}")
    config.workload.input_len, config.workload.output_len = "16", str(args.tokens)
    server_cpu0, driver_cpu0 = proc_cpu_s(server_pids), time.process_time()
    if workers == 0:
        result = run_bench(config)
    else:
        moving = _driver_moves_when_started(workers, cpu_list(args.driver_cpus))
        try:
            result = run_workers(config, workers)
        finally:
            if moving is not None:  # back with the workers' cores for the next point's spawn
                moving.join()
                os.sched_setaffinity(os.getpid(), cpu_list(args.client_cpus) or
                                     range(os.cpu_count() or 1))
    s = result.summary
    # over the client's measured window (the workers' start is idle time for the server); the
    # warm-up's share of the server's CPU makes this an upper bound
    window = s["client"].get("wall_s") or 0.0
    server_share = (proc_cpu_s(server_pids) - server_cpu0) / window if window else 0.0
    # this process: the driver (it merges and writes every worker's records), or with 0
    # workers the one-process client; its set-up and drain count too, so an upper bound
    driver_share = (time.process_time() - driver_cpu0) / window if window else 0.0
    ttft = np.array([(r.first_token_ns - r.scheduled_ns) / 1e6 for r in result.records
                     if r.ok and not r.warmup and r.first_token_ns])
    err = ttft - args.ttft_ms
    e2e_nominal_s = (args.ttft_ms + args.itl_ms * (args.tokens - 1)) / 1e3
    lag = max((w["loop_lag_ms"].get("p99") or 0.0 for w in s.get("workers", [])),
              default=s["client"]["loop_lag_ms"].get("p99") or 0.0)
    return {"workers": workers, "concurrency": concurrency,
            "completed": s["requests"]["completed"], "sent": s["requests"]["total"],
            "tok_s": s["throughput"]["output_tokens_per_s"] or 0.0,
            "ideal_tok_s": concurrency * args.tokens / e2e_nominal_s if e2e_nominal_s else None,
            "server_cores": server_share, "driver_cores": driver_share,
            "ttft_err_p50": float(np.percentile(err, 50)) if len(err) else None,
            "ttft_err_p99": float(np.percentile(err, 99)) if len(err) else None,
            "lag_p99": lag, "cpu_util": s["client"].get("cpu_utilization")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2",
                    help="worker counts; 0 = the single-process runner (baseline)")
    ap.add_argument("--concurrency", default="64,256")
    ap.add_argument("--server-procs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=2.0)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests-per-slot", type=int, default=3)
    ap.add_argument("--server", choices=("python", "c"), default="python",
                    help="tests/fakeserver.py processes, or benchmarks/fastserver.c threads "
                    "(zero delay only: a server cheap enough to leave the cores to the client)")
    ap.add_argument("--server-cpus", default=None, help="pin the server, e.g. 12-15")
    ap.add_argument("--client-cpus", default=None, help="pin latscope, e.g. 0-11")
    ap.add_argument("--driver-cpus", default=None,
                    help="with workers: move the driver to these cores once they started, "
                         "e.g. 13 (the workers keep --client-cpus)")
    args = ap.parse_args()
    if args.client_cpus:
        os.sched_setaffinity(0, cpu_list(args.client_cpus))
    counts = [int(x) for x in args.workers.split(",")]
    concs = [int(x) for x in args.concurrency.split(",")]
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; server: "
          f"{args.server_procs} procs, ttft {args.ttft_ms} ms, itl {args.itl_ms} ms, "
          f"{args.tokens} tokens; server cpus {args.server_cpus or 'any'}, client cpus "
          f"{args.client_cpus or 'any'}")
    rows = []
    if args.server == "c" and (args.ttft_ms or args.itl_ms):
        raise SystemExit("--server c answers at once: give --ttft-ms 0 --itl-ms 0")
    with fast_server(args.server_procs, args.ttft_ms, args.itl_ms, cpu_list(args.server_cpus),
                     args.server, args.tokens) as (url, pids), \
            tempfile.TemporaryDirectory() as tmp:
        for c in concs:
            for w in counts:
                if w > c:
                    continue
                rows.append(one_point(url, w, c, args, Path(tmp), pids))
                print_row(rows[-1], rows)
    print("\ncolumns: tok/s streamed; of ideal = share of the server schedule's bound; scaling "
          "= tok/s / (workers x tok/s of 1 worker); TTFT err = measured - nominal (ms); lag = "
          "worst worker's event-loop lag p99 (ms); server = the server processes' CPU in cores "
          f"(of {args.server_procs} processes); driver = this process's (the one-process "
          "client with 0 workers), set-up and drain included: an upper bound")


def print_row(r: dict, rows: list[dict]) -> None:
    base = next((x for x in rows if x["concurrency"] == r["concurrency"] and x["workers"] == 1),
                None)
    scaling = (r["tok_s"] / (r["workers"] * base["tok_s"])) if base and r["workers"] else None
    if len(rows) == 1:
        print(f"{'workers':>7} {'conc':>5} {'done':>11} {'tok/s':>9} {'of ideal':>8} "
              f"{'scaling':>7} {'TTFT err p50':>12} {'p99':>7} {'lag p99':>7} {'server':>6} "
              f"{'driver':>6}")

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    print(f"{r['workers']:>7} {r['concurrency']:>5} {r['completed']:>5}/{r['sent']:<5} "
          f"{r['tok_s']:>9.0f} "
          f"{f(r['ideal_tok_s'] and r['tok_s'] / r['ideal_tok_s'], '.0%'):>8} "
          f"{f(scaling, '.0%'):>7} "
          f"{f(r['ttft_err_p50'], '.2f'):>12} {f(r['ttft_err_p99'], '.2f'):>7} "
          f"{r['lag_p99']:>7.2f} {r['server_cores']:>6.2f} {r['driver_cores']:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
