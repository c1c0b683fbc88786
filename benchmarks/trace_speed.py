"""Benchmark: latscope trace vs HTA on a large Kineto trace (not part of the test suite).

Builds a >= 300 MB (uncompressed) Kineto JSON by repeating a real fixture (default #6, vLLM eager
on B200) with timestamps shifted by one trace span per copy and correlation / External ids
offset so the CPU-GPU joins stay valid. Then, each in a fresh subprocess so that peak memory is
its own, it times:

- latscope: read (streamed) + the full analysis (``analyze_trace``) + findings;
- HTA 0.5.0: ``TraceAnalysis(trace_dir)`` (parse) + ``get_temporal_breakdown`` +
  ``get_gpu_kernel_breakdown``.

Prints wall time, CPU time (user + system) and peak RSS (ru_maxrss) of each, and the ratios.
The bar (issue 5): latscope at least 5x faster and at most 1/3 of HTA's memory. Usage:

    python3 benchmarks/trace_speed.py [--size-mb 300] [--fixture PATH] [--keep] [--runs 1]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FIXTURE = (REPO.parent / "shared" / "fixtures" / "traces"
                   / "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz")

LATSCOPE_CHILD = """
import resource, sys, time
t0 = time.perf_counter()
from latscope.trace.readers import read_trace
from latscope.trace.analyze import analyze_trace
from latscope.findings.trace import trace_findings
trace = read_trace(sys.argv[1])
t1 = time.perf_counter()
result = analyze_trace(trace)
findings = trace_findings(result)
t2 = time.perf_counter()
idle = result.devices[0].breakdown.idle_share
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = usage.ru_utime + usage.ru_stime
print(f"RESULT {t2 - t0:.3f} {t1 - t0:.3f} {usage.ru_maxrss} {cpu:.3f} {idle:.4f}")
"""

HTA_CHILD = """
import logging, resource, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
temporal = analysis.get_temporal_breakdown(visualize=False)
analysis.get_gpu_kernel_breakdown(visualize=False)
t2 = time.perf_counter()
idle = temporal.iloc[0]["idle_time(us)"] / temporal.iloc[0]["kernel_time(us)"]
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu = usage.ru_utime + usage.ru_stime
print(f"RESULT {t2 - t0:.3f} {t1 - t0:.3f} {usage.ru_maxrss} {cpu:.3f} {idle:.4f}")
"""


def build_trace(fixture: Path, out: Path, size_mb: int) -> int:
    """Write the repeated trace; returns its size in bytes."""
    with gzip.open(fixture, "rt") as f:
        data = json.load(f)
    events = data.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t_min = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t_min + 1000.0  # + 1 ms apart
    one_copy = len(json.dumps(events))
    copies = max(1, -(-size_mb * 1_000_000 // one_copy))
    with open(out, "w") as f:
        head = json.dumps(data)[:-1]
        f.write(head + (', ' if len(data) else '') + '"traceEvents": [\n')
        first = True
        for k in range(copies):
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)) and e2.get("ph") != "M":
                    e2["ts"] = e2["ts"] + k * span
                elif e2.get("ph") == "M" and k > 0:
                    continue
                if "args" in e2:
                    args = dict(e2["args"])
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] = args[key] + k * 10_000_000
                    e2["args"] = args
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] = e2["id"] + k * 10_000_000
                f.write(("" if first else ",\n") + json.dumps(e2))
                first = False
        f.write("\n]}\n")
    return out.stat().st_size


def run_child(code: str, arg: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", code, str(arg)], capture_output=True, text=True,
                          check=False)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    total, parse, rss_kb, cpu, idle = line.split()[1:]
    return {"total_s": float(total), "parse_s": float(parse), "cpu_s": float(cpu),
            "peak_rss_mb": int(rss_kb) / 1024, "idle_share": float(idle)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=300)
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the generated trace")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="latscope_bench_"))
    try:
        trace = work / "rank0.json"
        size = build_trace(args.fixture, trace, args.size_mb)
        print(f"trace: {trace} {size / 1e6:.1f} MB uncompressed, from {args.fixture.name}")
        results: dict[str, list[dict[str, float]]] = {"latscope": [], "hta": []}
        for _ in range(args.runs):
            results["latscope"].append(run_child(LATSCOPE_CHILD, trace))
            results["hta"].append(run_child(HTA_CHILD, work))
        summary = {}
        for tool, runs in results.items():
            summary[tool] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            s = summary[tool]
            print(f"{tool:9s} wall {s['total_s']:8.2f} s (parse {s['parse_s']:7.2f} s)  "
                  f"CPU {s['cpu_s']:8.2f} s  peak RSS {s['peak_rss_mb']:7.0f} MB  "
                  f"idle share {s['idle_share']:.4f}")
        speed = summary["hta"]["total_s"] / summary["latscope"]["total_s"]
        cpu_speed = summary["hta"]["cpu_s"] / summary["latscope"]["cpu_s"]
        memory = summary["latscope"]["peak_rss_mb"] / summary["hta"]["peak_rss_mb"]
        print(f"latscope is {speed:.1f}x faster in wall time, {cpu_speed:.1f}x in CPU time "
              f"(bar >= 5x) and uses {memory:.2f} of HTA's peak memory (bar <= 0.33); median of "
              f"{args.runs} run(s). On a shared machine, CPU time is the steadier figure.")
        return 0 if speed >= 5 and memory <= 1 / 3 else 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
