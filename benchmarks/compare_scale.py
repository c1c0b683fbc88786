"""How long and how much memory ``latscope compare`` takes on long runs.

Writes two bench run directories of ``--requests`` requests with ``--tokens`` output tokens each
(latscope's own writer, tests/compare_samples.py), then, each in a fresh process: the comparison
(``campaign.compare.compare_runs``, requests.jsonl read a line at a time, token gaps kept for a
sample of requests), and for contrast ``rundir.read_run`` of one run (every record and its token
times in memory, what the per-run passes did). Prints seconds and peak RSS of each.

    python3 benchmarks/compare_scale.py [--requests 20000] [--tokens 512]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "src"))

_CHILD = """
import resource, sys, time
sys.path.insert(0, {src!r})
t = time.monotonic()
if sys.argv[1] == "compare":
    from latscope.campaign.compare import compare_runs
    c = compare_runs([sys.argv[2]], [sys.argv[3]])
    what = c.status
else:
    from latscope.rundir import read_run
    what = f"{{len(read_run(sys.argv[2])[1])}} records"
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{{time.monotonic() - t:.1f}} {{rss:.0f}} {{what}}")
"""


def _child(*args: str) -> str:
    code = _CHILD.format(src=str(REPO / "src"))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    from compare_samples import write_run

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--tokens", type=int, default=512)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="compare-scale-") as root:
        t = time.monotonic()
        runs = [write_run(Path(root) / side, n=args.requests, output_tokens=args.tokens,
                          concurrency=64, seed=i, itl_ms=2.0) for i, side in enumerate("ab")]
        size = (runs[0] / "requests.jsonl").stat().st_size / 2**20
        print(f"two runs of {args.requests} requests x {args.tokens} tokens written "
              f"({size:.0f} MiB of requests.jsonl each, {time.monotonic() - t:.0f} s)")
        seconds, rss, what = _child("compare", str(runs[0]), str(runs[1])).split(" ", 2)
        print(f"compare_runs: {seconds} s, peak RSS {rss} MiB ({what})")
        seconds, rss, what = _child("read_run", str(runs[0])).split(" ", 2)
        print(f"read_run of one run, for contrast: {seconds} s, peak RSS {rss} MiB ({what})")


if __name__ == "__main__":
    main()
