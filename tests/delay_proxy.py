"""A delaying TCP proxy for network tests: every chunk is held ``delay_ms`` in each direction.

``tc netem`` is not available on the test machines (no sch_netem), so a planted round trip is
made here instead: the proxy accepts on loopback, connects to the upstream at once, and forwards
each chunk it reads ``delay_ms`` after it arrived (a delay line: chunks keep their order and
spacing, throughput is not limited). A request/response exchange then takes ``2 x delay_ms`` more,
while a TCP handshake only reaches the proxy and stays fast -- the situation of a client talking
to a server behind a load balancer.

Forwarding uses one thread per direction with blocking sockets and ``time.sleep`` (nanosleep: a
tenth of a millisecond of overshoot, against up to 1 ms for an event loop's timer). Run it in its
own process so that it never competes with the measuring client for the GIL:
``with DelayProxy(("127.0.0.1", 8000), delay_ms=10) as proxy: proxy.url`` starts
``python3 tests/delay_proxy.py --upstream 127.0.0.1:8000 --delay-ms 10``, which prints
``PORT <n>`` once it listens.
"""

from __future__ import annotations

import argparse
import queue
import socket
import subprocess
import sys
import threading
import time

CHUNK = 65536


def _pump(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
    held: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def writer() -> None:
        while True:
            due, data = held.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return

    threading.Thread(target=writer, daemon=True).start()
    while True:
        try:
            data = src.recv(CHUNK)
        except OSError:
            data = b""
        held.put((time.monotonic() + delay_s, data))
        if not data:
            return


def _serve_client(client: socket.socket, upstream: tuple[str, int], delay_s: float) -> None:
    try:
        server = socket.create_connection(upstream)
    except OSError:
        client.close()
        return
    for sock in (client, server):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threads = [threading.Thread(target=_pump, args=(client, server, delay_s), daemon=True),
               threading.Thread(target=_pump, args=(server, client, delay_s), daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(delay_s + 0.05)  # let the last held chunk and the FIN go out
    client.close()
    server.close()


def serve(upstream: tuple[str, int], delay_ms: float, port: int = 0) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve_client, args=(client, upstream, delay_ms / 1000.0),
                         daemon=True).start()


class DelayProxy:
    """The proxy in a child process; ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, upstream: tuple[str, int], delay_ms: float = 10.0) -> None:
        self.upstream, self.delay_ms = upstream, delay_ms
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> DelayProxy:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--upstream", f"{self.upstream[0]}:{self.upstream[1]}",
             "--delay-ms", str(self.delay_ms)], stdout=subprocess.PIPE, text=True)
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
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    serve((host, int(port)), args.delay_ms, args.port)


if __name__ == "__main__":
    main()
