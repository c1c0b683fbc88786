"""Record raw NVML readings beside a running vLLM, for latscope's telemetry readers and rules.

    python3 benchmarks/record_gpu_telemetry.py --seconds 120 --interval 1 --out DIR
    python3 benchmarks/record_gpu_telemetry.py --seconds 120 --out DIR --server-pid PID \
        --metrics-url http://127.0.0.1:8000/metrics

Needs the standard library and ``pynvml`` (nvidia-ml-py) only: it loads
``src/latscope/telemetry/nvml.py`` (the reader latscope's sampler uses) by path, nothing else of
latscope. Writes into DIR:

- ``nvml.jsonl``: a ``system`` line (driver / NVML / CUDA versions), a ``devices`` line (each
  GPU's static facts: name, maxima, limits, ECC mode, XID registration), then one ``sample`` line
  per tick (``t_ns`` perf_counter, ``wall_time``; per GPU every reading, the errors of the calls
  the driver refused, each call's duration in microseconds, the GPU's processes). Flushed per line:
  Ctrl-C keeps what was recorded.
- ``processes.json``: for each PID seen on a GPU (and ``--server-pid`` and its children), its
  ``comm``, its command line with secret-looking values replaced, its parent, and its
  ``CUDA_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES`` (only those
  variables are read out of its environment).
- ``metrics.jsonl`` (with ``--metrics-url``): the server's ``/metrics`` page at each tick, right
  after the NVML reads (``t_ns``, ``wall_time``, ``text``), to line the GPU up with vLLM's queue.
- ``nvidia-smi-start.xml`` / ``nvidia-smi-end.xml``: ``nvidia-smi -q -x`` at both ends (when
  ``nvidia-smi`` exists), and ``meta.json`` (arguments, host, the pynvml version, the outcome).

No GPU, driver or permission: one line saying which, exit status 2, ``meta.json`` still written.

A recording for latscope's tests (vLLM serving on 127.0.0.1:8000, PID in $VLLM_PID): start this
first, leave ~15 s idle, then run a load that queues (more concurrent streams than
``--max-num-seqs``) for most of the window, e.g.

    python3 benchmarks/record_gpu_telemetry.py --seconds 150 --interval 1 --out h200-telemetry \
        --server-pid $VLLM_PID --metrics-url http://127.0.0.1:8000/metrics &
    sleep 15; vllm bench serve --base-url http://127.0.0.1:8000 --model MODEL \
        --dataset-name random --random-input-len 1024 --random-output-len 256 \
        --num-prompts 3000 --max-concurrency 512
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
READER = HERE.parent / "src" / "latscope" / "telemetry" / "nvml.py"
VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
SECRET_FLAG = re.compile(r"(key|token|secret|passw|auth)", re.IGNORECASE)
URL_PASSWORD = re.compile(r"(://[^/:@\s]+):[^/@\s]+@")


def load_reader():
    spec = importlib.util.spec_from_file_location("latscope_nvml_reader", READER)
    if spec is None or spec.loader is None:
        raise SystemExit(f"record_gpu_telemetry: {READER} not found (run from a latscope checkout)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with the value of any secret-looking flag and URL passwords replaced."""
    out, hide_next = [], False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        flag, eq, _value = arg.partition("=")
        if flag.startswith("-") and SECRET_FLAG.search(flag):
            if eq:
                out.append(f"{flag}=***")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(URL_PASSWORD.sub(r"\1:***@", arg))
    return out


def describe_process(pid: int, proc: Path = Path("/proc")) -> dict:
    """comm, redacted command line, parent and the *_VISIBLE_DEVICES of one process."""
    base = proc / str(pid)
    info: dict = {"pid": pid}
    try:
        info["comm"] = (base / "comm").read_text().strip()
        argv = (base / "cmdline").read_bytes().split(b"\0")
        info["cmdline"] = redact_argv([a.decode(errors="replace") for a in argv if a])
        stat = (base / "stat").read_text()
        info["ppid"] = int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError) as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
        return info
    try:
        env = (base / "environ").read_bytes().split(b"\0")
    except OSError as exc:
        info["environ_error"] = f"{type(exc).__name__}: {exc}"
        return info
    for item in env:
        name, _, value = item.decode(errors="replace").partition("=")
        if name in VISIBLE:
            info[name] = value
    return info


def children(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Every descendant of ``pid`` (vLLM's engine core and workers are its children)."""
    parents: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def nvidia_smi_xml(path: Path) -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "nvidia-smi not found"
    try:
        done = subprocess.run([exe, "-q", "-x"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    path.write_bytes(done.stdout)
    return f"exit {done.returncode}" + (f": {done.stderr.decode(errors='replace')[:300]}"
                                        if done.returncode else "")


def scrape(url: str) -> dict:
    t_ns, wall = time.perf_counter_ns(), time.time()
    try:
        with urllib.request.urlopen(url, timeout=2.0) as resp:
            return {"t_ns": t_ns, "wall_time": wall, "text": resp.read().decode(errors="replace")}
    except (OSError, ValueError) as exc:  # URLError, timeouts, a refused connection
        return {"t_ns": t_ns, "wall_time": wall, "error": f"{type(exc).__name__}: {exc}"}


def write_line(fh, obj: dict) -> None:
    fh.write(json.dumps(obj, default=str) + "\n")
    fh.flush()


def record(nvml, out: Path, seconds: float, interval: float, server_pid: int | None,
           metrics_url: str | None = None) -> dict:
    reader_mod = load_reader()
    reader = reader_mod.NvmlReader(nvml, timings=True)
    try:
        devices = reader.open()
    except reader_mod.NvmlUnavailable as exc:
        return {"status": "unavailable", "why": str(exc)}
    pids: set[int] = set()
    ticks = 0
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    try:
        with (out / "nvml.jsonl").open("w") as fh:
            system = reader.system()
            write_line(fh, {"kind": "system", "errors": system.errors, **system.values})
            write_line(fh, {"kind": "devices", "gpus": [d.to_dict() for d in devices]})
            period_ns = int(interval * 1e9)
            start_ns = time.perf_counter_ns()
            next_ns = start_ns
            while not stop["now"] and time.perf_counter_ns() - start_ns < seconds * 1e9:
                gpus = reader.read()
                write_line(fh, {"kind": "sample", "t_ns": gpus[0].t_ns if gpus else
                                time.perf_counter_ns(), "wall_time": time.time(),
                                "gpus": [g.to_dict() for g in gpus]})
                pids.update(p.pid for g in gpus for p in g.processes or ())
                if metrics_url:
                    with (out / "metrics.jsonl").open("a") as mfh:
                        write_line(mfh, scrape(metrics_url))
                ticks += 1
                next_ns += period_ns
                time.sleep(max(0.0, (next_ns - time.perf_counter_ns()) / 1e9))
    except KeyboardInterrupt:
        pass
    finally:
        reader.close()
    if server_pid is not None:
        pids.update([server_pid, *children(server_pid)])
    procs = [describe_process(pid) for pid in sorted(pids)]
    (out / "processes.json").write_text(json.dumps(procs, indent=2))
    return {"status": "ok", "gpus": len(devices), "samples": ticks, "processes": len(procs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--server-pid", type=int, default=None,
                    help="the vLLM server's PID: its (and its children's) visible devices too")
    ap.add_argument("--metrics-url", default=None,
                    help="the server's /metrics, scraped at each tick (e.g. "
                         "http://127.0.0.1:8000/metrics)")
    args = ap.parse_args(argv)
    if args.interval <= 0 or args.seconds <= 0:
        ap.error("--seconds and --interval must be > 0")
    args.out.mkdir(parents=True, exist_ok=True)
    meta: dict = {"args": {k: str(v) for k, v in vars(args).items()},
                  "host": socket.gethostname(), "python": sys.version.split()[0],
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import pynvml  # nvidia-ml-py
        meta["pynvml"] = getattr(pynvml, "__version__", None) or _dist_version()
    except ImportError as exc:
        pynvml, meta["outcome"] = None, {"status": "unavailable", "why": f"no pynvml: {exc}"}
    meta["nvidia_smi_start"] = nvidia_smi_xml(args.out / "nvidia-smi-start.xml")
    # written now too: a recording killed before its end still says how it was made
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2))
    if pynvml is not None:
        meta["outcome"] = record(pynvml, args.out, args.seconds, args.interval,
                                 args.server_pid, args.metrics_url)
    meta["nvidia_smi_end"] = nvidia_smi_xml(args.out / "nvidia-smi-end.xml")
    meta["ended"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2))
    outcome = meta["outcome"]
    if outcome["status"] != "ok":
        print(f"record_gpu_telemetry: no NVML telemetry: {outcome['why']}", file=sys.stderr)
        return 2
    print(f"record_gpu_telemetry: {outcome['samples']} samples of {outcome['gpus']} GPU(s), "
          f"{outcome['processes']} process(es) -> {args.out}")
    return 0


def _dist_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("nvidia-ml-py")
    except Exception:  # noqa: BLE001 -- a version is nice to have, never a reason to stop
        return None


if __name__ == "__main__":
    sys.exit(main())
