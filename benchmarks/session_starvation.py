#!/usr/bin/env python3
"""How long a process beside a busy vLLM CPU engine waits for a CPU, with the server in a
session of its own (``setsid``: its own autogroup) against one in the caller's session.

    python3 benchmarks/session_starvation.py [--rounds 8] [--tokens 1900]

For each placement it starts the embedded tiny vLLM with ``--max-num-seqs 2``, sends rounds of
two long and four short requests (the constrained test's pattern) while scraping ``/metrics``
every 10 ms, and meanwhile a sleeper thread wakes every 10 ms. It prints the sleeper's gaps over
200 ms with the run-queue wait its own ``/proc/thread-self/schedstat`` counted during each (a gap
that is all run-queue wait is the scheduler keeping a ready thread off the CPU), and the scrapes
that took over 300 ms. Linux only. On the 2-core Linux 6.18 box where it was found, a server in
its own session gave gaps of up to 4.9 s, all run-queue wait; in the caller's session, none.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from latscope.load.offcpu import run_queue_wait_s  # noqa: E402
from latscope.server import process  # noqa: E402
from latscope.server.target import LocalTarget  # noqa: E402


class Sleeper(threading.Thread):
    """Wakes every 10 ms; keeps each wake-up gap over 200 ms with its run-queue wait."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.gaps: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        last, waited = time.monotonic(), run_queue_wait_s() or 0.0
        while not self.stop.is_set():
            time.sleep(0.01)
            now, wait = time.monotonic(), run_queue_wait_s() or 0.0
            if now - last > 0.2:
                self.gaps.append((now - last, wait - waited))
            last, waited = now, wait


def _post(url: str, body: dict) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        resp.read()


def _scrape(host: str, port: int) -> float:
    start = time.monotonic()
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while sock.recv(65536):
            pass
    return time.monotonic() - start


def measure(own_session: bool, rounds: int, tokens: int) -> dict:
    real_popen = process.subprocess.Popen

    def popen(*args, **kwargs):  # the placement under test, whatever process.py chooses
        kwargs["start_new_session"] = own_session
        kwargs["process_group"] = None if own_session else 0
        return real_popen(*args, **kwargs)

    process.subprocess.Popen = popen  # type: ignore[assignment]
    try:
        target = LocalTarget(log_dir=Path("/tmp/latscope-starvation"),
                             serve_args=["--max-num-seqs", "2"]).start()
    finally:
        process.subprocess.Popen = real_popen  # type: ignore[assignment]
    sleeper, slow = Sleeper(), []
    try:
        host, port = "127.0.0.1", int(target.url.rsplit(":", 1)[1])
        url = f"{target.url}/v1/completions"
        sleeper.start()
        for _ in range(rounds):
            with ThreadPoolExecutor(6) as pool:
                futures = [pool.submit(_post, url, {"model": target.model_name, "prompt": "hi",
                                                    "max_tokens": n, "ignore_eos": True})
                           for n in (tokens, tokens, 8, 8, 8, 8)]
                while not all(f.done() for f in futures):
                    if (took := _scrape(host, port)) > 0.3:
                        slow.append(took)
                    time.sleep(0.01)
                for f in futures:
                    f.result()
    finally:
        sleeper.stop.set()
        target.stop()
    return {"gaps": sleeper.gaps, "slow_scrapes": slow}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1900)
    args = parser.parse_args()
    if run_queue_wait_s() is None:
        sys.exit("error: this kernel gives no /proc/thread-self/schedstat")
    print(f"{os.cpu_count()} CPUs, Linux {os.uname().release}, autogroup "
          f"{Path('/proc/sys/kernel/sched_autogroup_enabled').read_text().strip()}")
    for own in (True, False):
        out = measure(own, args.rounds, args.tokens)
        gaps = sorted(out["gaps"], reverse=True)
        where = "own session (setsid)" if own else "caller's session"
        print(f"server in {where}: {len(gaps)} sleeper gaps > 200 ms, longest "
              + (", ".join(f"{g:.2f} s ({w:.2f} s run-queue)" for g, w in gaps[:3]) or "-")
              + f"; {len(out['slow_scrapes'])} scrapes > 300 ms"
              + (f" (longest {max(out['slow_scrapes']):.2f} s)" if out["slow_scrapes"] else ""))


if __name__ == "__main__":
    main()
