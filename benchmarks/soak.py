"""Does latscope's memory stay flat over a long run, the passes after the load included?

Each run is ``latscope bench`` as a user runs it (``python3 -m latscope bench``, its own
process) against the local fake server (``tests/fakeserver.py``, its own process, zero delay:
as fast as the client can go), closed loop. Its resident memory is sampled every 0.1 s; the
load's end is the moment ``summary.json`` appears (the load writes it last), and what runs
after it (the decomposition and the per-request join of a scraped run, the report) is the
after-run part. Printed per run: RSS at its largest while the load ran, its largest after,
and the whole process's peak as the kernel counts it (``wait4``'s ``ru_maxrss``: nothing
between two samples escapes it), the seconds each part took, and the client's CPU per
streamed token. The bar (issue #52): the whole process's peak of a run 10x longer within
20 MB of the shorter one's (the last two counts), with ``/metrics`` scraped (the default: the
decomposition runs) and without (``--scrape-interval 0``). What still grows from run to run
is the prompts built before the load (``latscope.load.promptsource``: all of a run's, up to
65,536 of them, ~0.3 kB each here). The fake server has no ``/metrics`` page: its scrapes
fail quickly, and the decomposition still reads every record as it does against vLLM.
Words are taken as tokens (the fake server's /tokenize is turned off). Usage::

    python3 benchmarks/soak.py [--requests 1000,10000,100000] [--concurrency 64]
        [--output-len 256] [--scrape 2,0] [--src DIR]

``--src DIR`` runs the latscope at DIR (another checkout's ``src``) instead of this one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeserver import FakeServer  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20
    except (OSError, IndexError, ValueError):
        return None


def one_run(src: Path, url: str, requests: int, args: argparse.Namespace,
            scrape: float, out: Path) -> dict[str, float | None]:
    """One ``latscope bench`` process; its memory during the load, after it, and at its peak."""
    cmd = [sys.executable, "-m", "latscope", "bench", "--url", url, "--model", "fake-model",
           "-n", str(requests), "-c", str(args.concurrency), "--input-len", args.input_len,
           "--output-len", args.output_len, "--no-progress", "--workers", "1",
           "--scrape-interval", str(scrape), "--output-dir", str(out)]
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    with open(out.with_suffix(".stderr"), "w+b") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        during = after = 0.0
        load_end: float | None = None
        while True:  # wait4, not poll: the kernel's peak of the whole process comes with it
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss = rss_mb(proc.pid) or 0.0
            if load_end is None and (out / "summary.json").is_file():
                load_end = time.perf_counter()
            if load_end is None:
                during = max(during, rss)
            else:
                after = max(after, rss)
            time.sleep(0.1)
        proc.returncode = os.waitstatus_to_exitcode(status)
        end = time.perf_counter()
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"bench failed: {err.read().decode().strip()[-500:]}")
    peak = usage.ru_maxrss / 1024  # Linux: KiB
    summary = json.loads((out / "summary.json").read_text())
    client = summary.get("client") or {}
    return {"during": during, "after": after or None, "peak": peak,
            "load_s": (load_end or end) - t0, "after_s": end - (load_end or end),
            "cpu_us": client.get("cpu_us_per_output_token"),
            "completed": summary["requests"]["completed"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", default="1000,10000,100000")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--input-len", default="16")
    parser.add_argument("--output-len", default="256")
    parser.add_argument("--scrape", default="2,0", help="scrape intervals to run (0: off)")
    parser.add_argument("--src", type=Path, default=REPO / "src")
    args = parser.parse_args()
    counts = [int(n) for n in args.requests.split(",")]
    scrapes = [float(s) for s in args.scrape.split(",")]
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; latscope from "
          f"{args.src}; concurrency {args.concurrency}, {args.input_len} in / "
          f"{args.output_len} out")
    print(f"{'scrape':>6} {'requests':>9} {'load MB':>8} {'after MB':>9} {'peak MB':>8} "
          f"{'load s':>7} {'after s':>8} {'us CPU/tok':>10}")
    with FakeServer(ttft_ms=0, itl_ms=0, tokenize_mode="off") as srv, \
            tempfile.TemporaryDirectory(prefix="latscope-soak-") as tmp:
        for scrape in scrapes:
            peaks: dict[int, float] = {}
            for n in counts:
                run = one_run(args.src, srv.url, n, args, scrape, Path(tmp) / f"run-{scrape}-{n}")
                srv.reset()  # the fake server's record of each request, not the client's
                peaks[n] = float(run["peak"] or 0.0)
                after = f"{run['after']:9.1f}" if run["after"] else f"{'-':>9}"
                cpu = f"{run['cpu_us']:10.3f}" if run["cpu_us"] is not None else f"{'-':>10}"
                print(f"{scrape:>6g} {n:>9,} {run['during']:8.1f} {after} {run['peak']:8.1f} "
                      f"{run['load_s']:7.1f} {run['after_s']:8.1f} {cpu}", flush=True)
            ranked = sorted(counts)
            if len(ranked) >= 2 and ranked[-1] >= 10 * ranked[-2]:
                small, large = ranked[-2:]
                growth = peaks[large] - peaks[small]
                print(f"  scrape {scrape:g}: peak growth {small:,} -> {large:,} requests: "
                      f"{growth:+.1f} MB ({'within' if growth <= 20 else 'OVER'} the 20 MB bar)")


if __name__ == "__main__":
    main()
