#!/usr/bin/env python3
"""How busy is "busy": NVML's utilisation against a profile's busy share, on one GPU in the same
seconds, and what the profiler and diagnose's short profile load do to the figure (issue #23).

diagnose judges "the GPU was busy" from a profile (the union of GPU activity over the profile's
window, ``trace.gpu_idle``) or, without one, from NVML's utilisation (the share of the driver's
sample period in which any kernel ran); the capacity verdict trusts either past 70%. Whether the
two agree is measured, not assumed. Per round, arms in alternating order, each at the same
closed-loop concurrency with fresh prompts (its own seed: no arm feeds another's prefix cache):

- ``plain``: a steady load for ``--seconds``; NVML polled every 0.1 s.
- ``steady``: the same load, ``/start_profile`` a third of the way in, ``/stop_profile``
  ``--profile-s`` later: the profile of a steady batch (what the profiler itself costs shows as
  tokens/s inside its window against ``plain``).
- ``waves``: diagnose's own profile load (``/start_profile``, two waves of requests at the
  concurrency, ``/stop_profile``): a batch that ramps up and drains inside the profile.

Each arm's figures cover one window (``plain``: its middle; the profiled arms: start to stop of
the profile), in CLOCK_MONOTONIC for the client's chunks and the NVML polls alike:
output tokens/s in the window (from the client's per-chunk stamps), NVML utilisation mean, SM
clock and power, and for the profiled arms the trace's busy share (``latscope trace``).

    # on the GPU host, vLLM on 127.0.0.1:8000 started with --profiler-config (torch_profiler_dir)
    python3 benchmarks/gpu_busy_calibration.py load --url http://127.0.0.1:8000 \
        --trace-dir /tmp/prof --concurrency 64 --rounds 2 --out /tmp/cal
    python3 benchmarks/gpu_busy_calibration.py analyse /tmp/cal     # latscope trace, the table

Needs pynvml (nvidia-ml-py) and latscope's src on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path[:0] = [str(SRC)]

from latscope.model import RequestRecord  # noqa: E402

ARMS = ("plain", "steady", "waves")
POLL_S = 0.1
# NVML's utilisation covers the driver's last sample period (1/6 s to 1 s): a reading taken this
# long into a window is the first one wholly inside it
NVML_LAG_S = 0.5


class NvmlPoller(threading.Thread):
    """(monotonic ns, util %, SM clock MHz, power W) of one GPU every ``POLL_S``."""

    def __init__(self, index: int) -> None:
        super().__init__(daemon=True)
        import pynvml

        self.nv = pynvml
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.rows: list[tuple[int, int, int, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        nv, h = self.nv, self.handle
        while not self.done.is_set():
            t = time.monotonic_ns()
            util = nv.nvmlDeviceGetUtilizationRates(h).gpu
            clock = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
            power = nv.nvmlDeviceGetPowerUsage(h) / 1000
            self.rows.append((t, util, clock, power))
            self.done.wait(POLL_S)

    def window(self, t0: int, t1: int) -> dict:
        rows = [r for r in self.rows if t0 + NVML_LAG_S * 1e9 <= r[0] <= t1]
        if not rows:
            return {"nvml_samples": 0}
        return {"nvml_samples": len(rows),
                "nvml_util_mean": round(statistics.fmean(r[1] for r in rows), 1),
                "nvml_util_min": min(r[1] for r in rows),
                "sm_clock_mean": round(statistics.fmean(r[2] for r in rows)),
                "power_mean_w": round(statistics.fmean(r[3] for r in rows), 1)}


def post(url: str, path: str) -> None:
    req = urllib.request.Request(url.rstrip("/") + path, method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 (loopback server)
        resp.read()


def bench(args: argparse.Namespace, out: Path, seed: int, *, seconds: float | None = None,
          requests: int | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "latscope", "bench", "--url", args.url, "-c",
           str(args.concurrency), "--input-len", args.input_len, "--output-len",
           args.output_len, "--seed", str(seed), "--no-gpu-telemetry", "--no-progress",
           "--output-dir", str(out)]
    cmd += ["--duration", str(seconds)] if seconds else ["-n", str(requests)]
    return subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=(out.parent / f"{out.name}.err").open("w"))


def _env() -> dict[str, str]:
    """This checkout's src first, the caller's path kept (the GPU host's vLLM and deps live there)."""
    kept = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{SRC}:{kept}" if kept else str(SRC)}


def tokens_in(run: Path, t0: int, t1: int) -> dict:
    """Output tokens/s between two CLOCK_MONOTONIC instants, from the client's chunk stamps."""
    n = 0
    for line in (run / "requests.jsonl").open():
        rec = RequestRecord.from_dict(json.loads(line))  # times or, since schema 2, their gaps
        n += sum(1 for t in rec.chunk_ns if t0 <= t <= t1)
    return {"window_s": round((t1 - t0) / 1e9, 2), "tok_per_s": round(n / ((t1 - t0) / 1e9))}


def started(run: Path) -> tuple[int, float]:
    """The bench's first send (CLOCK_MONOTONIC ns) and its steady window's length (s)."""
    manifest = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    return int(manifest["start_ns"]), float(summary["throughput"]["window_s"])


def new_trace(trace_dir: Path, before: set[Path], wait_s: float = 120) -> str | None:
    from latscope.trace.profiles import TRACE_GLOB, profile_files

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        files = profile_files(sorted(set(trace_dir.glob(TRACE_GLOB)) - before))
        if files:
            size = files[0].path.stat().st_size
            time.sleep(2)
            if size and files[0].path.stat().st_size == size:
                return str(files[0].path)
        time.sleep(1)
    return None


def run_arm(arm: str, args: argparse.Namespace, poller: NvmlPoller, out: Path, seed: int) -> dict:
    trace_dir = Path(args.trace_dir)
    before = set(trace_dir.glob("**/*.pt.trace.json*"))
    run = out / f"{arm}-{seed}"
    if arm == "plain":
        bench(args, run, seed, seconds=args.seconds).wait()
        start, steady_s = started(run)
        t0, t1 = start + int(steady_s * 0.35e9), start + int(steady_s * 0.85e9)
        rec = {"arm": arm, **tokens_in(run, t0, t1), **poller.window(t0, t1)}
    elif arm == "steady":
        proc = bench(args, run, seed, seconds=args.seconds)
        while not (run / "manifest.json").exists() and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(1 + args.seconds * 0.25)  # past the ramp-up: the batch is full
        post(args.url, "/start_profile")
        t0 = time.monotonic_ns()
        time.sleep(args.profile_s)
        t1 = time.monotonic_ns()
        post(args.url, "/stop_profile")
        proc.wait()
        rec = {"arm": arm, **tokens_in(run, t0, t1), **poller.window(t0, t1),
               "trace": new_trace(trace_dir, before)}
    else:
        post(args.url, "/start_profile")
        t0 = time.monotonic_ns()
        bench(args, run, seed, requests=2 * args.concurrency).wait()
        t1 = time.monotonic_ns()
        post(args.url, "/stop_profile")
        t0 = max(t0, started(run)[0])  # the client's start-up is not the GPU's to answer for
        rec = {"arm": arm, **tokens_in(run, t0, t1), **poller.window(t0, t1),
               "trace": new_trace(trace_dir, before)}
    return rec


def load(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    poller = NvmlPoller(args.gpu)
    poller.start()
    results = []
    # warm-up: the first requests of a fresh server compile and fill caches; not measured
    bench(args, out / "warmup", 1, requests=2 * args.concurrency).wait()
    for r in range(args.rounds):
        order = ARMS if r % 2 == 0 else ARMS[::-1]
        for i, arm in enumerate(order):
            rec = {"round": r, **run_arm(arm, args, poller, out, seed=100 + 10 * r + i)}
            results.append(rec)
            print(json.dumps(rec), flush=True)
            (out / "calibration.json").write_text(json.dumps(
                {"args": vars(args), "arms": results}, indent=1))
    poller.done.set()
    (out / "nvml.json").write_text(json.dumps(poller.rows))
    return 0


def analyse(args: argparse.Namespace) -> int:
    cal = json.loads((Path(args.dir) / "calibration.json").read_text())
    for rec in cal["arms"]:
        if rec.get("trace") and "trace_busy" not in rec:
            res = subprocess.run([sys.executable, "-m", "latscope", "trace", rec["trace"], "--json"],
                                 capture_output=True, text=True,
                                 env=_env())
            try:
                dev = json.loads(res.stdout)["traces"][0]["devices"][0]
                b = dev["breakdown"]
                rec["trace_busy"] = round(b["busy_ms"] / b["window_ms"], 3)
                rec["trace_window_ms"] = round(b["window_ms"])
            except (ValueError, KeyError, IndexError) as exc:
                rec["trace_error"] = f"{type(exc).__name__}: {res.stderr[-300:]}"
    (Path(args.dir) / "calibration.json").write_text(json.dumps(cal, indent=1))
    print("| round | arm | window s | out tok/s | NVML util mean (min) | trace busy | SM MHz | W |")
    print("|--:|---|--:|--:|--:|--:|--:|--:|")
    for r in cal["arms"]:
        busy = f"{r['trace_busy']:.0%}" if "trace_busy" in r else "-"
        print(f"| {r['round']} | {r['arm']} | {r['window_s']} | {r['tok_per_s']:,} | "
              f"{r.get('nvml_util_mean', '-')} ({r.get('nvml_util_min', '-')}) | {busy} | "
              f"{r.get('sm_clock_mean', '-')} | {r.get('power_mean_w', '-')} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ld = sub.add_parser("load")
    ld.add_argument("--url", default="http://127.0.0.1:8000")
    ld.add_argument("--trace-dir", required=True)
    ld.add_argument("--out", required=True)
    ld.add_argument("--concurrency", type=int, default=64)
    ld.add_argument("--seconds", type=float, default=12.0, help="steady arms' load (12)")
    ld.add_argument("--profile-s", type=float, default=4.0, help="steady arm's profile (4)")
    ld.add_argument("--rounds", type=int, default=2)
    ld.add_argument("--gpu", type=int, default=0)
    ld.add_argument("--input-len", default="96..160")
    ld.add_argument("--output-len", default="32..96")
    an = sub.add_parser("analyse")
    an.add_argument("dir")
    args = p.parse_args(argv)
    return load(args) if args.cmd == "load" else analyse(args)


if __name__ == "__main__":
    raise SystemExit(main())
