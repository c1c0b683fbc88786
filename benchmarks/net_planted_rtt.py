"""How well `latscope net` measures a planted round trip, and what doctor costs.

Puts tests/delay_proxy.py (hold D ms each way, from each chunk's kernel receive time) in front of
tests/fakeserver.py on loopback and, for R interleaved rounds, measures the kept-alive HTTP round
trip directly and through the proxy. Prints, per round: the hold the proxy really applied
(median up + median down, from its own log), the measured difference of medians, and the error;
then the median error over rounds. Also times one `run_doctor()` on this host.

    python3 benchmarks/net_planted_rtt.py [--rounds 5] [--delay-ms 10] [--probes 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from delay_proxy import DelayProxy, read_truth  # noqa: E402
from fakeserver import FakeServer  # noqa: E402
from latscope.campaign.doctor import probe_network as probe  # noqa: E402
from latscope.campaign.doctor import run_doctor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--probes", type=int, default=20)
    args = parser.parse_args()
    errors = []
    with FakeServer(ttft_ms=50, itl_ms=10) as server, tempfile.TemporaryDirectory() as tmp:
        parts = urlsplit(server.url)
        for r in range(args.rounds):
            truth = Path(tmp) / f"holds{r}.txt"
            with DelayProxy((parts.hostname, parts.port), args.delay_ms, str(truth)) as proxy:
                direct = probe(server.url, args.probes, stream_requests=0).keepalive_ms
                proxied = probe(proxy.url, args.probes, stream_requests=0).keepalive_ms
            holds = read_truth(str(truth))
            planted = float(np.median(holds["up"]) + np.median(holds["down"]))
            measured = float(np.median(proxied) - np.median(direct))
            errors.append(measured - planted)
            print(f"round {r}: planted {planted:.3f} ms  measured {measured:.3f} ms  "
                  f"error {measured - planted:+.3f} ms  (direct p50 {np.median(direct):.3f}, "
                  f"proxied p50 {np.median(proxied):.3f}, min proxied "
                  f"{min(proxied):.3f})")
    print(f"median error over {args.rounds} rounds: {np.median(errors):+.3f} ms "
          f"(max abs {max(abs(e) for e in errors):.3f} ms) for a nominal {2 * args.delay_ms:g} ms")
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run_doctor()
        times.append(time.perf_counter() - t0)
    print(f"run_doctor() on this host (no GPU tools, no server): median {np.median(times):.3f} s")


if __name__ == "__main__":
    main()
