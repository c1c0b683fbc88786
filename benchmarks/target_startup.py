"""Figures for the embedded target: tiny-model build time, vLLM startup to the first healthy
``/health``, the server's memory (PSS and RSS summed over its process group) and stop time.

Run: ``python3 benchmarks/target_startup.py [--runs 3] [--dummy]``. Prints one line per run and the
medians. PSS (proportional set size, /proc/PID/smaps_rollup) shares pages among the processes that
map them, so the sum over the group is the memory the server really costs; the RSS sum
double-counts shared pages and is printed for comparison with `ps`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from latscope.server.process import group_members
from latscope.server.target import LocalTarget
from latscope.server.tinymodel import ensure_tiny_model


def _kib(pid: int, path: str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dummy", action="store_true", help="serve tiny-dummy")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ensure_tiny_model(root=Path(tmp), dummy=args.dummy)
        print(f"tiny model build (cold cache): {time.perf_counter() - t0:.2f} s")

    rows = []
    with tempfile.TemporaryDirectory() as logs:
        for run in range(args.runs):
            target = LocalTarget(model="tiny-dummy" if args.dummy else "tiny", log_dir=logs)
            target.start()
            time.sleep(2)  # let the worker settle before reading memory
            members = group_members(target.pid)
            pss = sum(_kib(p, "smaps_rollup", "Pss:") for p in members) / 2**20
            rss = sum(_kib(p, "status", "VmRSS:") for p in members) / 2**20
            t1 = time.perf_counter()
            target.stop()
            stop_s = time.perf_counter() - t1
            rows.append((target.ready_s, pss, rss, stop_s))
            print(f"run {run + 1}: ready {target.ready_s:.1f} s, {len(members)} processes, "
                  f"PSS {pss:.2f} GiB, RSS sum {rss:.2f} GiB, stop {stop_s:.2f} s")
    med = [statistics.median(col) for col in zip(*rows, strict=True)]
    print(f"median of {len(rows)}: ready {med[0]:.1f} s, PSS {med[1]:.2f} GiB, "
          f"RSS sum {med[2]:.2f} GiB, stop {med[3]:.2f} s")


if __name__ == "__main__":
    main()
