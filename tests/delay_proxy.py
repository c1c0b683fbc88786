"""A delaying TCP proxy for network tests: every chunk is held ``delay_ms`` in each direction.

``tc netem`` is not available on the test machines (no sch_netem), so a planted round trip is
made here instead: the proxy accepts on loopback, connects to the upstream at once, and forwards
each chunk it reads ``delay_ms`` after it arrived (a delay line: chunks keep their order and
spacing, throughput is not limited). A request/response exchange then takes ``2 x delay_ms`` more,
while a TCP handshake only reaches the proxy and stays fast -- the situation of a client talking
to a server behind a load balancer.

Each chunk is held from the moment the kernel received it (``SO_TIMESTAMPNS``), so a reader
thread that wakes late under load does not add to the delay; forwarding uses one thread per
direction with blocking sockets and ``time.sleep`` (nanosleep: a tenth of a millisecond of
overshoot, against up to 1 ms for an event loop's timer). Run it in its
own process so that it never competes with the measuring client for the GIL:
``with DelayProxy(("127.0.0.1", 8000), delay_ms=10) as proxy: proxy.url`` starts
``python3 tests/delay_proxy.py --upstream 127.0.0.1:8000 --delay-ms 10``, which prints
``PORT <n>`` once it listens.
"""

from __future__ import annotations

import argparse
import queue
import socket
import struct
import subprocess
import sys
import threading
import time

CHUNK = 65536
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux value; Python 3.11 lacks the name


class Truth:
    """Appends ``<direction> <held ms>`` per forwarded chunk to a file: what the proxy really held
    (arrival to hand-off to the kernel), so tests compare a measurement with what was planted."""

    def __init__(self, path: str | None) -> None:
        self.fh = open(path, "a", buffering=1) if path else None  # noqa: SIM115 (process-long)
        self.lock = threading.Lock()

    def record(self, direction: str, held_s: float) -> None:
        if self.fh is not None:
            with self.lock:
                self.fh.write(f"{direction} {held_s * 1000.0:.4f}\n")


def read_truth(path: str) -> dict[str, list[float]]:
    holds: dict[str, list[float]] = {"up": [], "down": []}
    with open(path) as fh:
        for line in fh:
            direction, ms = line.split()
            holds[direction].append(float(ms))
    return holds


def _pump(src: socket.socket, dst: socket.socket, delay_s: float, direction: str,
          truth: Truth) -> None:
    held: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def writer() -> None:
        while True:
            arrived, data = held.get()
            wait = arrived + delay_s - time.time()
            if wait > 0:
                time.sleep(wait)
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return
            truth.record(direction, time.time() - arrived)

    sender = threading.Thread(target=writer, daemon=True)
    sender.start()
    src.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    while True:
        try:
            data, ancillary, _, _ = src.recvmsg(CHUNK, socket.CMSG_SPACE(16))
        except OSError:
            data, ancillary = b"", []
        held.put((_arrival(ancillary), data))
        if not data:
            break
    # the last held chunk and the FIN go out before the sockets close (a peer that stopped
    # reading cannot hold the connection open past the timeout)
    sender.join(timeout=delay_s + 30)


def _arrival(ancillary: list[tuple[int, int, bytes]]) -> float:
    """When the kernel received the data (SO_TIMESTAMPNS, CLOCK_REALTIME), so that the hold also
    covers the time this thread took to wake up; now when the kernel gave no stamp (EOF)."""
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            sec, nsec = struct.unpack("qq", payload[:16])
            return sec + nsec / 1e9
    return time.time()


def _serve_client(client: socket.socket, upstream: tuple[str, int], delay_s: float,
                  truth: Truth) -> None:
    try:
        server = socket.create_connection(upstream)
    except OSError:
        client.close()
        return
    for sock in (client, server):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threads = [threading.Thread(target=_pump, args=(client, server, delay_s, "up", truth),
                                daemon=True),
               threading.Thread(target=_pump, args=(server, client, delay_s, "down", truth),
                                daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()  # each pump returns once its last held chunk and its FIN went out
    client.close()
    server.close()


def serve(upstream: tuple[str, int], delay_ms: float, port: int = 0,
          truth_path: str | None = None) -> None:
    truth = Truth(truth_path)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve_client, args=(client, upstream, delay_ms / 1000.0, truth),
                         daemon=True).start()


class DelayProxy:
    """The proxy in a child process; ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, upstream: tuple[str, int], delay_ms: float = 10.0,
                 truth_path: str | None = None) -> None:
        self.upstream, self.delay_ms, self.truth_path = upstream, delay_ms, truth_path
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> DelayProxy:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--upstream", f"{self.upstream[0]}:{self.upstream[1]}",
             "--delay-ms", str(self.delay_ms)]
            + (["--truth", self.truth_path] if self.truth_path else []),
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("PORT "):
            self.__exit__()
            raise RuntimeError(f"delay proxy did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()  # our own child, by its handle
            self.proc.wait(timeout=10)
            self.proc = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="hold per chunk, each way")
    parser.add_argument("--port", type=int, default=0, help="listen port (0 = any free)")
    parser.add_argument("--truth", help="append each chunk's real hold (ms) to this file")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    serve((host, int(port)), args.delay_ms, args.port, args.truth)


if __name__ == "__main__":
    main()
