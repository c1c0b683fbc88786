"""Does the OTLP receiver disturb the client's timing? The load generator's event-loop lag and
TTFT error with the receiver off, on and idle, and on while spans pour in.

Load: the deterministic fake server (``tests/fakeserver.py``, its own process; TTFT 20 ms, ITL
5 ms, 64 tokens), closed loop at concurrency 32, 400 requests, warm connections. Arms:

- ``off``: no receiver;
- ``idle``: a ``SpanCollector`` + ``SpanRecorder`` running, no span arriving;
- ``R spans/s``: the same while a separate process posts OTLP/HTTP bodies made from a real vLLM
  0.32 span (``tests/data/otlp/export_request.bin``, repeated) every 200 ms -- what the local
  target's ``OTEL_BSP_SCHEDULE_DELAY=200`` makes vLLM do -- at R spans per second.

Per arm: the runner's own 10 ms-timer loop lag (p50/p99, ms), the TTFT error (client TTFT - the
fake server's true first-chunk time after the request reached the host; p50/p99, ms) and the
spans written. Arms alternate within each repetition; each figure is the median over ``--reps``.

    python3 benchmarks/otlp_overhead.py [--reps 3] [--rates 100,2000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakeserver import FakeServer  # noqa: E402
from latscope.load import BenchConfig, run_bench  # noqa: E402
from latscope.server.otlp import SpanCollector  # noqa: E402
from latscope.server.otlp_record import SpanRecorder  # noqa: E402

SAMPLE = REPO / "tests" / "data" / "otlp" / "export_request.bin"

# Posts BATCH spans (copies of the sample's request spans) to URL every 0.2 s until killed.
_SENDER = r"""
import http.client, sys, time, urllib.parse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
url, per_batch, sample = sys.argv[1], int(sys.argv[2]), sys.argv[3]
req = ExportTraceServiceRequest(); req.ParseFromString(open(sample, "rb").read())
spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
scope = req.resource_spans[0].scope_spans[0]
del scope.spans[:]
for i in range(per_batch):
    scope.spans.append(spans[i % len(spans)])
body = req.SerializeToString()
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port)
print("READY", len(body), flush=True)
next_t = time.monotonic()
while True:
    conn.request("POST", u.path, body=body, headers={"content-type": "application/x-protobuf"})
    conn.getresponse().read()
    next_t += 0.2
    time.sleep(max(0.0, next_t - time.monotonic()))
"""


def one_run(srv: FakeServer, out: Path, collector: SpanCollector | None) -> dict[str, Any]:
    srv.reset()
    cfg = BenchConfig(url=srv.url, model="fake-model", num_requests=400, concurrency=32,
                      warmup=32, output_dir=out, seed=1, trace_requests=collector is not None)
    cfg.workload.input_len, cfg.workload.output_len = "16", "64"
    observers = [SpanRecorder(collector, max_wait_s=0.0)] if collector else []
    result = run_bench(cfg, observers)
    truth = srv.truth()
    errors = np.asarray([(r.first_token_ns - r.scheduled_ns) / 1e6
                         - (truth[r.request_id].chunk_ns[0] - truth[r.request_id].recv_ns) / 1e6
                         for r in result.records if r.ok and not r.warmup
                         and r.request_id in truth and truth[r.request_id].chunk_ns])
    lag = result.summary["client"]["loop_lag_ms"]
    return {"lag_p50": lag["p50"], "lag_p99": lag["p99"],
            "err_p50": float(np.percentile(errors, 50)), "err_p99": float(np.percentile(errors, 99)),
            "spans": observers[0].spans if observers else 0}


def arm(name: str, rate: int, srv: FakeServer, collector: SpanCollector, tmp: Path,
        rep: int) -> dict[str, Any]:
    sender = None
    if rate:
        sender = subprocess.Popen([sys.executable, "-c", _SENDER, collector.http_endpoint,
                                   str(max(1, rate // 5)), str(SAMPLE)],
                                  stdout=subprocess.PIPE, text=True)
        assert sender.stdout is not None
        assert sender.stdout.readline().startswith("READY")
        time.sleep(0.5)  # let it reach its steady rate
    try:
        return one_run(srv, tmp / f"{name}-{rep}", None if name == "off" else collector)
    finally:
        if sender is not None:
            sender.terminate()
            sender.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rates", default="100,2000", help="spans/s of the busy arms")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",") if r]
    arms = [("off", 0), ("idle", 0)] + [(f"{r} spans/s", r) for r in rates]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in arms}
    with FakeServer(ttft_ms=20, itl_ms=5) as srv, SpanCollector() as collector, \
            tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name, rate in arms:
                results[name].append(arm(name, rate, srv, collector, Path(tmp), rep))
        handle = collector.handle_ms
    print(f"OTLP receiver overhead: fake server TTFT 20 ms / ITL 5 ms, c=32, 400 requests, "
          f"median of {args.reps}")
    print(f"{'arm':<16}{'lag p50':>9}{'lag p99':>9}{'err p50':>9}{'err p99':>9}{'spans':>8}")
    for name, _ in arms:
        runs = results[name]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{name:<16}{med['lag_p50']:>9.2f}{med['lag_p99']:>9.2f}{med['err_p50']:>9.2f}"
              f"{med['err_p99']:>9.2f}{med['spans']:>8.0f}")
    if handle:
        print(f"receiver: {len(handle)} OTLP requests, decode+write mean "
              f"{statistics.mean(handle):.2f} ms, max {max(handle):.2f} ms (its own threads)")
    print("lag = the runner's 10 ms timer lateness; err = client TTFT - true TTFT (ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
