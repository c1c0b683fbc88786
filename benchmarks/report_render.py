"""Figures for the diagnose report: size of report.html/.md/.json and the time to render them,
for the full sample report of the tests (every section, 6 sweep points, 2 experiments) and for
a large one (24 sweep points, 600 time-series samples, 8 experiments, 30 kernels).

Run: ``python3 benchmarks/report_render.py [--repeat 3]``. The first render includes starting
vl-convert's JavaScript engine (once per process); later ones do not. The host's other load adds
noise, so compare runs on one host.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from latscope.report.write import write_reports  # noqa: E402
from report_samples import full_report  # noqa: E402


def large_report() -> dict:
    r = full_report()
    base = r["sweep"]["points"][-1]
    r["sweep"]["points"] = [dict(base, load=c, ttft_p99_ms=50.0 + 9 * c) for c in range(1, 25)]
    n = 600
    r["timeseries"] = {"t_s": [i * 2 for i in range(n)], "running": [i % 17 for i in range(n)],
                       "waiting": [i % 29 for i in range(n)],
                       "kv_usage": [(i % 100) / 100 for i in range(n)],
                       "preemptions": [i // 50 for i in range(n)],
                       "client_in_flight": [i % 31 for i in range(n)],
                       "load_level": [i // 25 for i in range(n)]}
    r["experiments"] = [copy.deepcopy(r["experiments"][i % 2]) for i in range(8)]
    r["trace"]["top_kernels"] = [dict(r["trace"]["top_kernels"][1], ms=30 - i) for i in range(30)]
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name, build in (("full", full_report), ("large", large_report)):
        times, paths = [], {}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                paths = write_reports(Path(tmp), build())
                times.append(time.perf_counter() - start)
                sizes = {k: p.stat().st_size for k, p in paths.items()}
        print(f"{name:6} html {sizes['html'] / 1024:6.0f} KiB  md {sizes['md'] / 1024:4.0f} KiB  "
              f"json {sizes['json'] / 1024:4.0f} KiB  render first {times[0]:.2f} s, then "
              f"median {statistics.median(times[1:] or times):.2f} s")


if __name__ == "__main__":
    main()
