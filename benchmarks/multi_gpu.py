#!/usr/bin/env python3
"""The runs that need two GPUs (issue #25), for a host like the H200 one with >= 2 GPUs
(python 3.12, vLLM 0.26, no network, latscope's src on PYTHONPATH, the dummy 8B-shaped model of
the GPU kit's make_llama8b_dummy.py (docs/diagnose.md)). Ready, not yet run: no multi-GPU host was lent.

    # (a) tensor-parallel diagnose with --profile: healthy, then one planted cross-rank fault each
    python3 benchmarks/multi_gpu.py tp --model DIR --out DIR [--only NAME,...] [--deadline 560]
    # (b) tune: serial search on GPU 0, then --parallel 2 --gpus-per-trial 1 on GPUs 0,1
    python3 benchmarks/multi_gpu.py tune --model DIR --out DIR --arm serial
    python3 benchmarks/multi_gpu.py tune --model DIR --out DIR --arm parallel
    python3 benchmarks/multi_gpu.py tune-compare DIR      # same best? wall time? GPUs disjoint?
    python3 benchmarks/multi_gpu.py list                  # scenarios and expected verdicts
    python3 benchmarks/diagnose_matrix.py table DIR/runs  # anywhere: replay the TP runs

(a) reuses benchmarks/diagnose_matrix.py (its server start, diagnose call, stop, packing): each
scenario's ``scenario.json``, with the verdict expected, is written before its run; the run
directories are packed without the raw profiles into ``OUT/runs.tgz`` (replay fixtures, like
tests/data/gpu-matrix). One scenario per call keeps each call under 10 minutes (a TP=2 start of
the 8B model is ~2 min, diagnose ~3-5 min). (b) writes ``OUT/tune-ARM/tune.json`` (each trial's
``devices``, start and end), ``OUT/tune-ARM.wall_s`` and, while the arm runs, which processes
held each GPU (NVML, every 2 s) in ``OUT/tune-ARM.gpu-procs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diagnose_matrix as dm  # noqa: E402 (this folder, not a package)

sys.path.insert(0, str(dm.SRC))  # latscope itself, for verdict_matches

SHORT = dm.SHORT
TP2 = ("--tensor-parallel-size", "2")
# NCCL carries the all-reduce only without vLLM's own all-reduce paths (custom all-reduce and
# torch symmetric memory, the defaults for TP=2 on NVLink): both off in the NCCL scenarios
NCCL_ONLY = ("--disable-custom-all-reduce",)
NCCL_ONLY_ENV = ("VLLM_ALLREDUCE_USE_SYMM_MEM=0",)
DIAG = (*SHORT, "--max-load", "64", "--budget", "120s")


@dataclass(frozen=True)
class TpScenario(dm.Scenario):
    gpu_burner: int | None = None  # a CUDA busy loop on this GPU index while diagnose runs


# The expected verdicts were written here before any of these runs.
SCENARIOS: tuple[TpScenario, ...] = (
    TpScenario("tp2-healthy", "--tensor-parallel-size 2, default flags, load past the knee",
               {"kind": "capacity", "no_flag_blamed": True}, server=TP2, diagnose=DIAG,
               est_s=330),
    TpScenario("tp2-gpu1-shared", "TP=2, a CUDA busy loop (bf16 8192^2 matmuls) on GPU 1 (rank 1) "
               "for the whole diagnose: rank 1 is the straggler, rank 0 waits in every "
               "all-reduce",
               {"kind": "cause", "finding": ("gpu.other_process", "trace.rank_straggler")},
               server=TP2, diagnose=DIAG, gpu_burner=1, est_s=330),
    TpScenario("tp2-nccl", "TP=2 with the all-reduce on NCCL (--disable-custom-all-reduce, "
               "VLLM_ALLREDUCE_USE_SYMM_MEM=0): the baseline of tp2-nccl-p2p-off",
               {"kind": "capacity", "no_flag_blamed": True}, server=(*TP2, *NCCL_ONLY),
               env=NCCL_ONLY_ENV, diagnose=DIAG, est_s=330),
    TpScenario("tp2-nccl-p2p-off", "as tp2-nccl, plus NCCL_P2P_DISABLE=1 NCCL_ALGO=Ring "
               "NCCL_PROTO=Simple: the all-reduce goes through host memory, on every rank alike",
               {"kind": "cause", "finding": "gpu.nccl_p2p_disable"},
               server=(*TP2, *NCCL_ONLY),
               env=(*NCCL_ONLY_ENV, "NCCL_P2P_DISABLE=1", "NCCL_ALGO=Ring", "NCCL_PROTO=Simple"),
               diagnose=DIAG, est_s=330),
)

BURNER = """
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
while True:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("tp", "tune"):
        r = sub.add_parser(name)
        r.add_argument("--model", required=True)
        r.add_argument("--out", required=True)
        r.add_argument("--served-name", default="llama8b")
        r.add_argument("--max-model-len", type=int, default=8192)
    tp = sub.choices["tp"]
    tp.add_argument("--work", default="/tmp/multi-gpu")
    tp.add_argument("--only", help="comma-separated scenario names, in this order")
    tp.add_argument("--deadline", type=float, default=560)
    tp.add_argument("--legacy-entry", action="store_true")
    tp.add_argument("--extra-server-flags", default="")
    tune = sub.choices["tune"]
    tune.add_argument("--arm", choices=("serial", "parallel"), required=True)
    tune.add_argument("--param", default="max_num_seqs=8,32,128")
    cmp_ = sub.add_parser("tune-compare")
    cmp_.add_argument("out")
    sub.add_parser("list")
    args = p.parse_args(argv)
    if args.cmd == "list":
        for s in SCENARIOS:
            print(f"{s.name:18} expect {json.dumps(s.expect)}\n{'':18} {s.planted}")
        return 0
    if args.cmd == "tp":
        return run_tp(args)
    if args.cmd == "tune":
        return run_tune(args)
    return tune_compare(Path(args.out))


# --- (a) tensor-parallel diagnose -----------------------------------------------------------

def run_tp(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    out, runs = Path(args.out), Path(args.work) / "runs"
    out.mkdir(parents=True, exist_ok=True)
    runs.mkdir(parents=True, exist_ok=True)
    by_name = {s.name: s for s in SCENARIOS}
    names = args.only.split(",") if args.only else list(by_name)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}; see `list`")
    log = (out / "multi_gpu.log").open("a")
    results = []
    for s in (by_name[n] for n in names):
        if s.est_s > args.deadline - (time.monotonic() - t0):
            dm._say(log, f"skip {s.name}: not enough time left in this call")
            continue
        server = dm._start_server(s, args, out, log)
        burner = None
        try:
            if server is None:
                continue
            burner = _start_burner(s.gpu_burner, log) if s.gpu_burner is not None else None
            results.append(dm._diagnose(s, server, runs, log))
            results[-1]["rank_files"] = sorted(p.name for p in server.prof_dir.glob(
                "*.pt.trace.json*"))  # what the profile wrote: one file per rank, and the API
            # server's CPU trace
        finally:
            if burner is not None:
                dm.with_group(burner.pid, signal.SIGKILL)
            dm._stop(server, log)
            dm._keep_log(server, [s], runs)
    dm._pack(runs, out / "runs.tgz")
    (out / "multi_gpu.json").write_text(json.dumps(results, indent=1))
    from latscope.findings.verdict import verdict_matches

    for r in results:
        ok, why = verdict_matches(r["verdict"], r["expect"])
        dm._say(log, f"{r['name']}: {'right' if ok else 'WRONG: ' + why}")
    return 0


def _start_burner(gpu: int, log) -> subprocess.Popen:
    """The CUDA busy loop on one GPU, on the host's last core, in its own process group."""
    core = str((os.cpu_count() or 1) - 1)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    proc = subprocess.Popen(["taskset", "-c", core, sys.executable, "-c", BURNER], env=env,
                            start_new_session=True)
    dm._say(log, f"GPU burner on GPU {gpu} (pid {proc.pid}, core {core})")
    return proc


# --- (b) tune: serial vs --parallel 2 --gpus-per-trial 1 ------------------------------------

def run_tune(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / f"tune-{args.arm}"
    # --enforce-eager: a start without torch.compile (~1 min), so that the arm run second does
    # not start faster from the first one's compile cache
    serve = (f"{sys.executable} -m vllm.entrypoints.cli.main serve {shlex.quote(args.model)} "
             f"--load-format dummy --host 127.0.0.1 --port {{port}} --served-model-name "
             f"{args.served_name} --max-model-len {args.max_model_len} --enforce-eager "
             f"--max-num-seqs {{max_num_seqs}}")
    scale = (["--parallel", "1", "--gpus-per-trial", "1", "--gpus", "0"] if args.arm == "serial"
             else ["--parallel", "2", "--gpus-per-trial", "1", "--gpus", "0,1"])
    cmd = [sys.executable, "-m", "latscope", "tune", "--serve-cmd", serve, "--param", args.param,
           "--search", "grid", "--concurrency", "32", "-n", "256", "--input-len", "128",
           "--output-len", "64", "--ready-timeout", "300", "-o", str(run_dir), *scale]
    print(shlex.join(cmd), flush=True)
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_gpus, args=(out / f"tune-{args.arm}.gpu-procs.jsonl",
                                                          stop), daemon=True)
    sampler.start()
    t0 = time.monotonic()
    rc = subprocess.call(cmd)
    wall = time.monotonic() - t0
    stop.set()
    sampler.join(timeout=5)
    (out / f"tune-{args.arm}.wall_s").write_text(f"{wall:.1f}\n")
    print(f"{args.arm}: rc={rc}, wall {wall:.0f} s", flush=True)
    return rc


def _sample_gpus(path: Path, stop: threading.Event) -> None:
    """Every 2 s: the process groups holding each GPU (NVML), one JSON line per sample."""
    try:
        import pynvml
    except ImportError:
        path.write_text('{"error": "nvidia-ml-py not installed"}\n')
        return
    pynvml.nvmlInit()
    with path.open("w") as f:
        while not stop.wait(2.0):
            row = {"t": time.time(), "gpus": {}}
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                row["gpus"][str(i)] = sorted(_group(p.pid) for p in procs)
            f.write(json.dumps(row) + "\n")
            f.flush()


def _group(pid: int) -> int:
    """The process group: each trial's server runs in its own (latscope starts it so), so two
    groups on one GPU are two trials' servers, whatever processes each server has there."""
    try:
        return os.getpgid(pid)
    except OSError:  # gone since NVML listed it (or another PID namespace)
        return -pid


def tune_compare(out: Path) -> int:
    """Same best config, wall times, and no GPU shared by two trials running at once (from the
    trials' recorded devices and times, and from NVML's process lists)."""
    arms = {}
    for arm in ("serial", "parallel"):
        data = json.loads((out / f"tune-{arm}" / "tune.json").read_text())
        wall = float((out / f"tune-{arm}.wall_s").read_text())
        arms[arm] = (data, wall)
        trials = data["trials"]
        print(f"{arm}: wall {wall:.0f} s, {len(trials)} trials, best {data['result']['best']}")
        for t in trials:
            print(f"  {t['config']} GPUs {t['devices'] or '?'} {t['status']} "
                  f"{t['finished'] - t['started']:.0f} s")
    same = arms["serial"][0]["result"]["best"] == arms["parallel"][0]["result"]["best"]
    print(f"same best configuration: {same}")
    print(f"wall time parallel / serial: {arms['parallel'][1] / arms['serial'][1]:.2f}")
    clashes = _overlapping_on_one_gpu(arms["parallel"][0]["trials"])
    print(f"trials running at once on one GPU (tune.json): {clashes or 'none'}")
    shared = _nvml_shared(out / "tune-parallel.gpu-procs.jsonl")
    print(f"NVML samples with two trials' servers on one GPU: {shared}")
    return 0 if same and not clashes and shared == 0 else 1


def _overlapping_on_one_gpu(trials: list[dict]) -> list[str]:
    out = []
    for i, a in enumerate(trials):
        for b in trials[i + 1:]:
            at_once = a["started"] < b["finished"] and b["started"] < a["finished"]
            common = set(a["devices"].split(",")) & set(b["devices"].split(",")) - {""}
            if at_once and common:
                out.append(f"{a['config']} and {b['config']} on GPU {','.join(sorted(common))}")
    return out


def _nvml_shared(path: Path) -> int | str:
    if not path.is_file():
        return "not sampled"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if rows and "error" in rows[0]:
        return rows[0]["error"]
    return sum(any(len(set(groups)) > 1 for groups in r["gpus"].values()) for r in rows)


if __name__ == "__main__":
    sys.exit(main())
