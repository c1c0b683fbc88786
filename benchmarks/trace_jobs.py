"""trace --jobs: wall time and peak RSS per worker for N per-rank traces analysed with --jobs 1
and --jobs K (copies of a real fixture trace stand in for the ranks).

    python3 benchmarks/trace_jobs.py                     # 8 ranks, --jobs 1 and 2
    python3 benchmarks/trace_jobs.py --ranks 16 --jobs 1,4,8,16 --trace BIG.pt.trace.json.gz

With --jobs 1 the traces are analysed one after another in this process (peak RSS is the
largest of them plus the interpreter); with more, each one in a fresh process that exits after
it, so a worker's peak RSS is one trace's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src")]

from latscope.trace.analyze import AnalysisOptions  # noqa: E402
from latscope.trace.parallel import analyze_files, cross_rank  # noqa: E402

DEFAULT = REPO.parent / "shared" / "fixtures" / "traces" / "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--jobs", default="1,2")
    args = ap.parse_args()
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"{args.ranks} copies of {args.trace.name} ({args.trace.stat().st_size / 1e6:.1f} MB)")
    print(f"{'jobs':>4} {'wall s':>7} {'per trace s (mean)':>18} {'peak RSS/worker MB':>19} "
          f"{'matched collectives':>19}")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i in range(args.ranks):
            files.append(str(Path(tmp) / f"rank{i}{''.join(args.trace.suffixes)}"))
            shutil.copy(args.trace, files[-1])
        for jobs in (int(j) for j in args.jobs.split(",")):
            t0 = time.perf_counter()
            analyses = analyze_files(files, AnalysisOptions(), jobs=jobs)
            wall = time.perf_counter() - t0
            view = cross_rank(analyses)
            per = sum(a.wall_s for a in analyses) / len(analyses)
            rss = max(a.peak_rss_mb for a in analyses)
            matched = view.collectives.matched if view.collectives else 0
            print(f"{jobs:>4} {wall:>7.2f} {per:>18.2f} {rss:>19.0f} {matched:>19}", flush=True)


if __name__ == "__main__":
    main()
