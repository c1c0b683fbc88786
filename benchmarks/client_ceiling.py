"""One client process's ceiling: latscope next to a bare raw-socket client, in one run.

Against the fake server at full speed (``tests/fakeserver.py`` with TTFT = ITL = 0: every
response, 256 tokens by default, in one write, in its own process), for each concurrency
(64, 256, 1024 by default), alternating the two clients ``--reps`` times:

- **floor**: the least a streaming client can do on an asyncio ``Protocol`` (uvloop, as latscope
  uses): keep-alive connections opened before the run, one pre-built request per send, the
  received bytes kept with one ``perf_counter_ns()`` per read, the end found with one
  ``endswith``, and the tokens counted once the response ended (one C-level ``count``). No
  framing checks, no records, no files.
- **latscope**: ``run_bench`` as ``latscope bench`` runs it (records written, statistics kept,
  every hardening check on), warm-up = concurrency.

Printed per concurrency (medians over the repetitions): streamed output tokens/s sustained,
i.e. until every token received was also read (the floor: first send to last end, its count is
done by then; latscope: its measured window, ``summary.json`` client.wall_s, from the first
measured send to the last response parsed, over the tokens of the responses that ended in it),
latscope / floor, the
TTFT each reports and the true one (the server's first write - the kernel's receive time of the
request, both CLOCK_MONOTONIC), latscope's event-loop lag p50 / p99 (the run's own monitor;
the floor runs the same monitor, its lag is printed beside), and CPU time per streamed token:
the client's (latscope: its measured window, ``summary.json`` client.cpu_s, over the tokens of
the responses that ended in it; the floor: its whole run) and the server's during the floor's
run. CPU time, unlike tokens/s, barely moves with what else runs on the box. Everything shares
the box with the server: the figures are a contended client's, and only the ratio in one run
means much. Under each latscope row: its tokens/s from first send to last *end* (what this
script printed before: when the unparsed queue held most of the run, as 512 responses of 34 KB
at c=64 did when it was bounded at 16 MiB, that was the receive rate with the parsing left for
after the last end, not a rate the client sustains), its CPU share of one core over the window,
the unparsed queue's peak and how often a slot waited for it (``client.backpressure_waits``),
and run by run the whole process's user / system CPU seconds and minor page faults (the
kernel's counts, set-up included: runs that split in two tell there where the time went).
``--client-cpus`` / ``--server-cpus`` pin the two to their own cores (on a host with SMT,
cores of different physical cores: ``/sys/devices/system/cpu/cpuN/topology/thread_siblings_list``).

    python3 benchmarks/client_ceiling.py [--reps 3] [--concurrency 64,256,1024] [--tokens 256]
    python3 benchmarks/client_ceiling.py --src /tmp/old/src   # another build, same run
    python3 benchmarks/client_ceiling.py --word-prompts   # prompts as sent (no /tokenize)
    python3 benchmarks/client_ceiling.py --server c --client-cpus 3 --server-cpus 11

``--src DIR`` (repeatable) adds the latscope build at DIR (a copy of an older ``src``) as one
more client, run in a subprocess with that ``PYTHONPATH``, so builds alternate in one run; its
row then gives this build's CPU per token minus its own, repetition by repetition, with a 95%
interval (tokens/s swing 2x with a shared box's load, the paired difference much less).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Iterator

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "benchmarks")]

from fakeserver import FakeServer  # noqa: E402

_LAG_INTERVAL_S = 0.01


async def _watch_lag(out: list[float]) -> None:
    while True:
        t = time.perf_counter_ns()
        await asyncio.sleep(_LAG_INTERVAL_S)
        out.append((time.perf_counter_ns() - t) / 1e6 - _LAG_INTERVAL_S * 1e3)


class _Floor(asyncio.Protocol):
    def __init__(self) -> None:
        self.reads: list[tuple[int, bytes]] = []
        self.done: asyncio.Future[int] | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reads.append((time.perf_counter_ns(), data))
        if data.endswith(b"0\r\n\r\n") and self.done is not None:
            self.done.set_result(self.reads[0][0])


async def _floor(url: str, concurrency: int, n: int, tokens: int) -> dict[str, Any]:
    host, port = url.split("//")[1].split(":")
    loop = asyncio.get_running_loop()
    conns = [(await loop.create_connection(_Floor, host, int(port)))[1]
             for _ in range(concurrency)]
    body = json.dumps({"model": "fake-model", "prompt": "hello " * 16, "max_tokens": tokens,
                       "stream": True, "stream_options": {"include_usage": True},
                       "ignore_eos": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: "
            f"application/json\r\naccept: text/event-stream\r\ncontent-length: {len(body)}\r\n"
            "x-request-id: ").encode()
    left = iter(range(n))
    sent: dict[str, int] = {}
    first: dict[str, int] = {}
    ends: list[int] = []
    counted = [0]

    async def slot(conn: _Floor) -> None:
        for i in left:
            rid = f"floor-{i}"
            conn.reads, conn.done = [], loop.create_future()
            sent[rid] = time.perf_counter_ns()
            conn.transport.write(head + rid.encode() + b"\r\n\r\n" + body)
            await conn.done
            ends.append(conn.reads[-1][0])
            # the first token: the read holding the first text mark (the head comes alone)
            first[rid] = next(ns for ns, d in conn.reads if b'"text":"' in d)
            counted[0] += b"".join(d for _, d in conn.reads).count(b'"text":"')

    lags: list[float] = []
    monitor = asyncio.create_task(_watch_lag(lags))
    await asyncio.gather(*(slot(c) for c in conns))
    monitor.cancel()
    for c in conns:
        c.transport.close()
    span = (max(ends) - min(sent.values())) / 1e9
    return {"tok_s": counted[0] / span, "ttft": {r: (first[r] - sent[r]) / 1e6 for r in sent},
            "lag": (float(np.percentile(lags, 50)), float(np.percentile(lags, 99)))
            if lags else (None, None)}


def run_floor(url: str, concurrency: int, n: int, tokens: int) -> dict[str, Any]:
    import uvloop
    cpu0 = time.process_time()
    out = uvloop.run(_floor(url, concurrency, n, tokens))
    out["cpu_s"] = time.process_time() - cpu0  # connects and the loop included: a little high
    out["tokens"] = n * tokens
    return out


_LATSCOPE = """
import json, sys
from latscope.load import BenchConfig, run_bench
try:
    from latscope.stats import ttft_ms
except ImportError:  # a build from before latscope.analysis.stats moved up
    from latscope.analysis.stats import ttft_ms
url, c, n, tokens, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
cfg = BenchConfig(url=url, model="fake-model", num_requests=n, concurrency=c, warmup=c,
                  output_dir=out, seed=1)
cfg.workload.input_len, cfg.workload.output_len = "16", str(tokens)
result = run_bench(cfg)
measured = [r for r in result.records if not r.warmup and r.ok]
span = (max(r.end_ns for r in measured) - min(r.sent_ns for r in measured)) / 1e9
lag = result.summary["client"]["loop_lag_ms"]
# the CPU window (summary client.cpu_s) starts at the first measured send: every response that
# ended inside it was parsed inside it, warm-up ones included
start = result.manifest["start_ns"]
window_tokens = sum(r.output_tokens or 0 for r in result.records if r.ok and r.end_ns >= start)
client = result.summary["client"]
print(json.dumps({"tok_s": window_tokens / client["wall_s"],
                  "recv_tok_s": sum(r.output_tokens for r in measured) / span,
                  "cpu_s": client["cpu_s"], "tokens": window_tokens,
                  "util": client.get("cpu_utilization"),
                  "peak_mb": client.get("unparsed_peak_bytes", 0) / 1e6,
                  "waits": client.get("backpressure_waits"),
                  "parser": client.get("stream_parser", "python (a build before C)"),
                  "ttft": {r.request_id: ttft_ms(r) for r in measured},
                  "lag": [lag.get("p50"), lag.get("p99")]}))
"""


def run_latscope(src: str, url: str, concurrency: int, n: int, tokens: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        # the build first, then whatever the caller's path held (a --target install's packages)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (src, os.environ.get("PYTHONPATH")) if p)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-c", _LATSCOPE, url, str(concurrency), str(n),
                               str(tokens), str(Path(tmp) / "run")],
                              capture_output=True, text=True, env=env, timeout=600)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"latscope ({src}) failed: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the whole process's (set-up and read-back included), from the kernel: where CPU a token
    # moves, whether it went to the kernel (system time, page faults: glibc trimming the heap's
    # top under the reads made runs split in two, docs/bench.md) or to Python (user time)
    out["process"] = {key: getattr(after, key) - getattr(before, key)
                      for key in ("ru_utime", "ru_stime", "ru_minflt")}
    return out


def _cpu_s(pid: int) -> float:
    """utime + stime of a process (the fake server's), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _true_ttft(truth: dict[str, Any], rids: list[str]) -> float | None:
    values = [(truth[r].chunk_ns[0] - truth[r].recv_ns) / 1e6 for r in rids
              if r in truth and truth[r].chunk_ns]
    return float(np.median(values)) if values else None


def _med(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def measure(srv: FakeServer, clients: dict[str, str | None], reps: int, concurrency: int,
            n: int, tokens: int) -> dict[str, dict[str, list[Any]]]:
    rows: dict[str, dict[str, list[Any]]] = {k: {"tok_s": [], "ttft": [], "true": [],
                                                 "lag50": [], "lag99": [], "cpu_us": [],
                                                 "srv_us": [], "recv": [], "util": [],
                                                 "peak_mb": [], "waits": [], "parser": [],
                                                 "process": []}
                                             for k in clients}
    for rep in range(reps):
        order = list(clients) if rep % 2 == 0 else list(reversed(clients))
        for name in order:
            srv.reset()
            src = clients[name]
            assert srv.proc is not None
            srv_cpu0 = _cpu_s(srv.proc.pid)
            res = (run_floor(srv.url, concurrency, n, tokens) if src is None
                   else run_latscope(src, srv.url, concurrency, n, tokens))
            truth = srv.truth()
            row = rows[name]
            row["tok_s"].append(res["tok_s"])
            for key in ("recv", "util", "peak_mb", "waits", "parser", "process"):
                row[key].append(res.get("recv_tok_s" if key == "recv" else key))
            row["ttft"].append(float(np.median(list(res["ttft"].values()))))
            row["true"].append(_true_ttft(truth, list(res["ttft"])))
            row["lag50"].append(res["lag"][0])
            row["lag99"].append(res["lag"][1])
            # µs of CPU per streamed token: the client's, and the server's during the floor's
            # run (latscope's runs also ask the server to /tokenize the prompts first)
            row["cpu_us"].append(res["cpu_s"] / res["tokens"] * 1e6 if res["tokens"] else None)
            if src is None:
                row["srv_us"].append((_cpu_s(srv.proc.pid) - srv_cpu0) / (n * tokens) * 1e6)
    return rows


# two-sided 95% Student t quantiles by degrees of freedom (1-9); 1.96 past them
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def _paired(this: list[Any], other: list[Any]) -> str:
    """Mean difference of paired values (this - other, repetition by repetition: the two builds
    ran next to each other) with its 95% interval."""
    diffs = [a - b for a, b in zip(this, other) if a is not None and b is not None]
    if len(diffs) < 2:
        return "-"
    half = _T95.get(len(diffs) - 1, 1.96) * statistics.stdev(diffs) / len(diffs) ** 0.5
    return f"{statistics.mean(diffs):+.3f} +/- {half:.3f}"


class _CServer:
    """benchmarks/fastserver.c as ``measure`` uses a FakeServer: it records nothing, so no true
    TTFT; its CPU is read from its PID as the fake server's is."""

    def __init__(self, url: str, pid: int) -> None:
        self.url, self.proc = url, types.SimpleNamespace(pid=pid)

    def reset(self) -> None:
        pass

    def truth(self) -> dict[str, Any]:
        return {}


@contextlib.contextmanager
def _server(kind: str, tokens: int, word_prompts: bool,
            cpus: set[int] | None = None) -> Iterator[Any]:
    if kind == "c":
        from bench_workers import fast_server

        with fast_server(1, 0, 0, cpus, kind="c", tokens=tokens) as (url, pids):
            yield _CServer(url, pids[0])
        return
    tokenize = "off" if word_prompts else None  # None: the server's /tokenize
    with FakeServer(ttft_ms=0, itl_ms=0, tokenize_mode=tokenize) as srv:
        if cpus:
            assert srv.proc is not None
            os.sched_setaffinity(srv.proc.pid, cpus)
        yield srv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", default="64,256,1024")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--requests-per-slot", type=int, default=32,
                        help="requests per concurrency slot, per run (the floor's run must be long "
                        "next to its first wave: at 8, ~30 ms at c=64, its rate swung 2x)")
    parser.add_argument("--word-prompts", action="store_true",
                        help="the fake server without /tokenize: latscope counts words as tokens "
                        "and builds its prompts as it sends them (with /tokenize, all before)")
    parser.add_argument("--server", choices=("python", "c"), default="python",
                        help="tests/fakeserver.py (records the true TTFT; ~0.25 us of CPU per "
                        "token, more than the floor's, on the same cores) or benchmarks/"
                        "fastserver.c (a canned stream at ~0.03 us a token: the client's own "
                        "ceiling; words as tokens, no true TTFT)")
    parser.add_argument("--src", action="append", default=[],
                        help="another latscope src directory to run beside this one")
    parser.add_argument("--client-cpus", default=None,
                        help="pin both clients (this process and the builds it starts), e.g. 3")
    parser.add_argument("--server-cpus", default=None,
                        help="pin the server, e.g. 11 (unpinned, on the 16-core GPU host "
                        "every client's runs fell in two groups, ~3.2M and ~5.3M tok/s)")
    args = parser.parse_args()
    from bench_workers import cpu_list

    if args.client_cpus:
        os.sched_setaffinity(0, cpu_list(args.client_cpus))
    server_cpus = cpu_list(args.server_cpus)
    clients: dict[str, str | None] = {"floor": None, "latscope": str(REPO / "src")}
    for i, src in enumerate(args.src):
        clients[f"src{i + 1}"] = str(Path(src).resolve())
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a contended box "
          "reads lower for every client; compare within a row); client cpus "
          f"{args.client_cpus or 'any'}, server cpus {args.server_cpus or 'any'}")
    header = (f"{'c':>5} {'client':<9} {'tok/s':>10} {'/floor':>7} {'TTFT':>8} {'true':>8} "
              f"{'lag p50':>8} {'lag p99':>8} {'cpu/tok':>8} {'srv/tok':>8}")
    print(header)
    for c in (int(x) for x in args.concurrency.split(",")):
        with _server(args.server, args.tokens, args.word_prompts, server_cpus) as srv:
            rows = measure(srv, clients, args.reps, c, c * args.requests_per_slot, args.tokens)
        floor = _med(rows["floor"]["tok_s"])
        for name, row in rows.items():
            tok = _med(row["tok_s"])
            ratio = tok / floor if tok and floor else None
            print(f"{c:>5} {name:<9} {_fmt(tok, ',.0f'):>10} {_fmt(ratio, '.2f'):>7} "
                  f"{_fmt(_med(row['ttft'])):>8} {_fmt(_med(row['true'])):>8} "
                  f"{_fmt(_med(row['lag50'])):>8} {_fmt(_med(row['lag99'])):>8} "
                  f"{_fmt(_med(row['cpu_us']), '.2f'):>8} {_fmt(_med(row['srv_us']), '.2f'):>8}")
            print(f"{'':>15}runs: " + " ".join(f"{v:,.0f}" for v in row["tok_s"]))
            if name not in ("floor", "latscope"):
                print(f"{'':>15}latscope - {name}: "
                      f"{_paired(rows['latscope']['cpu_us'], row['cpu_us'])} us CPU/tok, paired")
            if clients[name] is not None:
                print(f"{'':>15}first send to last end {_fmt(_med(row['recv']), ',.0f')} tok/s, "
                      f"CPU {_fmt(_med(row['util']), '.2f')} of a core")
                print(f"{'':>15}unparsed peak {_fmt(_med(row['peak_mb']))} MB, "
                      f"{_fmt(_med(row['waits']), '.0f')} backpressure waits")
                print(f"{'':>15}stream reader: {row['parser'][-1]}")
                runs = row["process"]
                print(f"{'':>15}process: user / system s "
                      + " ".join(f"{r['ru_utime']:.2f}/{r['ru_stime']:.2f}" for r in runs))
                print(f"{'':>15}process: minor page faults (k) "
                      + " ".join(f"{r['ru_minflt'] / 1e3:.0f}" for r in runs))


if __name__ == "__main__":
    main()
