#!/usr/bin/env python3
"""Passive scenarios (``diagnose_matrix.py``'s ``PASSIVE``): each planted fault under traffic
latscope does not send, diagnosed by ``latscope diagnose --passive``, its expected verdict
written into the run directory before the run.

    # on the GPU host (vLLM installed), from the checkout's root:
    python3 benchmarks/diagnose_matrix.py passive --model DIR --out DIR [--only a,b]
    # here, on the local CPU build and its tiny model (the cpu_* sizes):
    flock /tmp/latscope-heavy.lock python3 benchmarks/diagnose_matrix.py passive --local --out DIR
    # anywhere: replayed with today's code
    python3 benchmarks/diagnose_matrix.py table DIR/runs

Per scenario: a fresh server (its own process group, 127.0.0.1), ``vllm bench serve`` at the
scenario's rate in the background (``tests/independent_traffic.py``: vLLM's own client, not
latscope), the window opened once the server's counters show the traffic arriving, then the
generator stopped and the server too. ``OUT/NAME.tgz`` is each run directory (a replay fixture
for ``tests/data/passive/``), ``OUT/passive.json`` the verdicts, ``OUT/passive.log`` the log.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = Path(os.environ.get("LATSCOPE_SRC") or HERE.parent / "src")
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(SRC))


def run_passive(args: argparse.Namespace, scenarios: tuple[Any, ...]) -> int:
    from diagnose_matrix import _say

    if not args.local and not args.model:
        raise SystemExit("passive: --model DIR (GPU host) or --local (the CPU build)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = Path(args.work) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in scenarios if not args.only or s.name in args.only.split(",")]
    log = (out / "passive.log").open("a")
    results = []
    for s in chosen:
        with _server(s, args, Path(args.work), log) as (url, model, tokenizer, log_path):
            if url is None:
                continue
            results.append(_scenario(s, args, url, model, tokenizer, log_path, runs, log))
        _pack(runs / s.name, out / f"{s.name}.tgz")
    (out / "passive.json").write_text(json.dumps(results, indent=1))
    _say(log, f"done: {len(results)} scenarios")
    return 0


class _server:
    """The scenario's server: latscope's local CPU target, or ``vllm serve`` on the GPU host."""

    def __init__(self, s: Any, args: argparse.Namespace, work: Path, log: Any) -> None:
        self.s, self.args, self.work, self.log = s, args, work, log
        self.target: Any = None
        self.gpu: Any = None

    def __enter__(self) -> tuple[Any, ...]:
        if self.args.local:
            from latscope.server.target import LocalTarget

            flags = self.s.cpu_server if self.s.cpu_server is not None else self.s.server
            env = dict(kv.split("=", 1) for kv in self.s.env)
            self.target = LocalTarget(serve_args=flags, env=env,
                                      log_dir=self.work / self.s.name).start()
            t = self.target
            return t.url, t.model_name, str(t.tokenizer_dir), t.log_path
        from diagnose_matrix import PORT, _start_server

        gpu_args = argparse.Namespace(model=self.args.model, legacy_entry=False,
                                      extra_server_flags="", served_name=self.args.served_name,
                                      max_model_len=self.args.max_model_len)
        self.gpu = _start_server(_AsScenario(self.s), gpu_args, self.work, self.log)
        if self.gpu is None:
            return None, None, None, None
        return (f"http://127.0.0.1:{PORT}", self.args.served_name, self.args.model,
                self.gpu.log_path)

    def __exit__(self, *exc: object) -> None:
        from diagnose_matrix import _stop

        if self.target is not None:
            self.target.stop()
        _stop(self.gpu, self.log)


class _AsScenario:
    def __init__(self, s: Any) -> None:
        self.name, self.server, self.env, self.server_cores = s.name, s.server, s.env, ""


def _size(s: Any, local: bool) -> dict[str, Any]:
    if local:
        return {"rate": s.cpu_rate, "num_prompts": s.cpu_prompts,
                "input_len": s.cpu_input_len, "output_len": s.cpu_output_len,
                "window": s.cpu_window}
    return {"rate": s.rate, "num_prompts": s.prompts, "input_len": s.input_len,
            "output_len": s.output_len, "window": s.window}


def _scenario(s: Any, args: argparse.Namespace, url: str, model: str, tokenizer: str,
              log_path: Path, runs: Path, log: Any) -> dict[str, Any]:
    from diagnose_matrix import _read_verdict, _say
    from independent_traffic import BenchServeTraffic

    size = _size(s, args.local)
    run_dir = runs / s.name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "scenario.json").write_text(json.dumps({
        **asdict(s), "sized": size, "local": bool(args.local),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1))
    traffic = BenchServeTraffic(url, model=model, tokenizer=tokenizer,
                                num_prompts=size["num_prompts"], rate=size["rate"],
                                input_len=size["input_len"], output_len=size["output_len"])
    with traffic:
        arrived = _wait_for_traffic(url, traffic)
        _say(log, f"{s.name}: traffic arriving after {arrived:.0f} s")
        before = _finished(url)
        cmd = [sys.executable, "-m", "latscope", "diagnose", "--url", url, "--passive",
               "--window", size["window"], "--log", str(log_path), "-o", str(run_dir)]
        env = {**os.environ, "PYTHONPATH": f"{SRC}:{os.environ.get('PYTHONPATH', '')}"}
        t0 = time.monotonic()
        with (runs / f"{s.name}.out").open("w") as term:
            rc = subprocess.call(cmd, env=env, stdout=term, stderr=subprocess.STDOUT)
        seconds = time.monotonic() - t0
        after = _finished(url)
    verdict = _read_verdict(run_dir)
    _say(log, f"  rc={rc} in {seconds:.0f} s; the server finished {after - before:g} "
         f"requests meanwhile: {verdict.get('text', '')[:300]}")
    return {"name": s.name, "rc": rc, "seconds": round(seconds, 1), "verdict": verdict,
            "expect": s.expect, "finished_during_window": after - before}


def _finished(url: str) -> float:
    """``vllm:request_success_total`` now (summed over its labels)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


def _wait_for_traffic(url: str, traffic: Any, timeout_s: float = 180.0) -> float:
    """Seconds until the server has finished a request of the generator's (its start-up,
    imports included, is 20-30 s on a 2-core box)."""
    t0 = time.monotonic()
    start = _finished(url)
    while time.monotonic() - t0 < timeout_s:
        if _finished(url) > start:
            return time.monotonic() - t0
        if not traffic.running:
            raise SystemExit(f"vllm bench serve ended before any request: {traffic.log[-2000:]}")
        time.sleep(1.0)
    raise SystemExit(f"no request of vllm bench serve finished within {timeout_s:.0f} s")


def _pack(run_dir: Path, dest: Path) -> None:
    if not run_dir.is_dir():
        return
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(run_dir, arcname=run_dir.name,
                filter=lambda ti: None if ".pt.trace.json" in ti.name else ti)
