"""A deterministic OpenAI-compatible SSE server that records the truth about every request.

It answers ``/v1/completions`` and ``/v1/chat/completions`` (streaming and not), ``/v1/models``,
``/tokenize`` and ``/detokenize`` (one token per whitespace-separated word) and ``GET /truth``.
Each streamed request gets its first content chunk ``ttft_ms`` after the request reached the host,
then one chunk every ``itl_ms`` (an absolute schedule, so no drift). With both at 0 the whole
response is one write, which measures a client's ceiling. The server notes when each request
reached the host (the kernel's receive timestamp) and when it wrote each chunk, on
``time.perf_counter_ns()``'s clock (CLOCK_MONOTONIC, shared by every process on the host);
``GET /truth`` returns them keyed by the ``x-request-id`` header, so a test can hold a client's
TTFT/ITL against what really happened. It is a small raw-socket HTTP/1.1 server on an asyncio
loop (keep-alive, chunked encoding) so that it stays cheap next to the client under test.

Use it in a separate process: ``with FakeServer(ttft_ms=50, itl_ms=10) as srv: srv.url``; or run
``python3 tests/fakeserver.py --port 0`` (it prints ``PORT <n>`` when listening).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL = "fake-model"
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not export it


@dataclass
class Truth:
    recv_ns: int  # when the request reached the host (kernel receive timestamp)
    read_ns: int = 0  # when this server parsed it (later under a burst)
    chunk_ns: list[int] = field(default_factory=list)
    end_ns: int = 0
    authorization: str = ""  # the request's Authorization header, to check what was sent
    path: str = ""  # the request target as received
    prompt: str = ""  # a digest of the prompt sent (which prompt each request carried)


@dataclass
class ServerConfig:
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    output_tokens: int | None = None  # None: honour max_tokens from the request
    fail_every: int = 0  # every Nth request (1-based) fails in fail_mode; 0: never
    # http500 | http400 | reset | malformed | hang | stall (headers, then nothing) |
    # badlength (Content-Length: abc) | longhead (a header line that never ends) |
    # huge (a stream of 1 MiB text chunks)
    fail_mode: str = "http500"
    continuous_usage: bool = True  # honour stream_options.continuous_usage_stats
    # "longhead": /tokenize answers a header line that never ends; "off": it answers 404
    tokenize_mode: str = ""
    # POST /start_profile and /stop_profile answer, their times kept (GET /profile_calls); with
    # a folder, /stop_profile writes a small Kineto-named trace there, as vLLM's profiler does
    profile_dir: str | None = None


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@functools.lru_cache(maxsize=256)
def _events(chat: bool, n: int, prompt_tokens: int, include_usage: bool,
        continuous: bool) -> tuple[bytes, ...]:
    events = []
    for i in range(n):
        if chat:
            choice = {"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": None}
        else:
            choice = {"index": 0, "text": f" tok{i}", "finish_reason": None}
        if i == n - 1:
            choice["finish_reason"] = "length"
        obj: dict[str, Any] = {"id": "cmpl-fake", "object": "chunk", "model": MODEL,
                               "choices": [choice]}
        if continuous:
            obj["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": i + 1,
                            "total_tokens": prompt_tokens + i + 1}
        events.append(_event(obj))
    if include_usage:
        events[-1] += _event({"id": "cmpl-fake", "model": MODEL, "choices": [], "usage": {
            "prompt_tokens": prompt_tokens, "completion_tokens": n,
            "total_tokens": prompt_tokens + n}})
    events[-1] += b"data: [DONE]\n\n"
    return tuple(events)


@functools.lru_cache(maxsize=64)
def _whole_stream(*key: Any) -> bytes:
    return b"".join(_chunk(e) for e in _events(*key)) + b"0\r\n\r\n"


class Handler:
    """One connection on a raw non-blocking socket: parses requests (keep-alive), answers them.

    Raw sockets instead of an ``asyncio.Protocol`` for one reason: ``recvmsg`` gives the kernel's
    receive timestamp of each read (``SO_TIMESTAMPNS``), i.e. when the request reached this host,
    not when this (possibly busy) server got round to reading it. That is the true start of a
    request's TTFT; without it, the server's own backlog under a burst of 256 requests would be
    charged to the client under test.
    """

    def __init__(self, app: App, sock: socket.socket) -> None:
        self.app, self.sock, self.fd = app, sock, sock.fileno()
        self.buf = b""
        self.out = bytearray()
        self.busy = False
        self.closed = False
        self.arrival_ns = 0
        app.loop.add_reader(self.fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data, ancdata, _, _ = self.sock.recvmsg(1 << 18, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not data:
            self.close()
            return
        if not self.buf:
            self.arrival_ns = _kernel_ns(ancdata)
        self.data_received(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.busy:
            return
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1").split("\r\n")
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if len(self.buf) < head_end + 4 + length:
            return
        body = self.buf[head_end + 4: head_end + 4 + length]
        self.buf = self.buf[head_end + 4 + length:]
        method, path, _ = head[0].split(" ", 2)
        self.busy = True
        self.app.handle(self, method, path, headers, body, self.arrival_ns)

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if self.out:
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close()
            return
        if sent < len(data):
            self.out += data[sent:]
            self.app.loop.add_writer(self.fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        del self.out[:sent]
        if not self.out:
            self.app.loop.remove_writer(self.fd)

    def respond(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}
        self.write(b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
            status, reason.get(status, "X").encode(), ctype.encode(), len(body), body))
        self.done()

    def done(self) -> None:
        self.busy = False
        if self.buf:
            self.arrival_ns = time.perf_counter_ns()  # a pipelined request: no better stamp
            self.data_received(b"")

    def abort(self) -> None:
        """Close with a TCP reset (SO_LINGER 0), as a crashing server would."""
        if not self.closed:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.app.loop.remove_reader(self.fd)
            if self.out:
                self.app.loop.remove_writer(self.fd)
            self.sock.close()


def _kernel_ns(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The kernel receive time (CLOCK_REALTIME) mapped onto perf_counter_ns (CLOCK_MONOTONIC)."""
    for level, kind, raw in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
            sec, nsec = struct.unpack("qq", raw[:16])
            return sec * 1_000_000_000 + nsec - (time.time_ns() - time.perf_counter_ns())
    return time.perf_counter_ns()


def _accept(app: App, listener: socket.socket) -> None:
    while True:
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        app.connections += 1
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        Handler(app, sock)


def _write_profile(folder: Path) -> None:
    """One kernel of 1 ms on device 0, named as vLLM 0.32's CPU build names its worker's file."""
    folder.mkdir(parents=True, exist_ok=True)
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0.0,
               "dur": 1000.0, "args": {"device": 0, "stream": 7}}]
    path = folder / f"rank0.{time.time_ns()}.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))


class App:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.truth: dict[str, Truth] = {}
        self.vocab: dict[str, int] = {}  # /tokenize: one token per whitespace-separated word
        self.count = 0
        self.connections = 0  # accepted so far (GET /connections): keep-alive tests count them
        self.last_path = ""
        self.loop = asyncio.get_event_loop()
        self.profile_calls: list[tuple[str, int]] = []  # (path, perf_counter_ns)

    def handle(self, conn: Handler, method: str, path: str, headers: dict[str, str],
               body: bytes, recv_ns: int) -> None:
        self.last_path = path
        path = path.split("?", 1)[0]
        if method == "GET" and path == "/v1/models":
            conn.respond(200, json.dumps({"object": "list", "data": [
                {"id": MODEL, "object": "model", "max_model_len": 4096}]}).encode())
        elif method == "GET" and path == "/connections":
            conn.respond(200, json.dumps(self.connections).encode())
        elif method == "GET" and path == "/truth":
            conn.respond(200, json.dumps({k: vars(v) for k, v in self.truth.items()}).encode())
        elif method == "POST" and path == "/truth/reset":
            self.truth.clear()
            conn.respond(200, b"{}")
        elif method == "POST" and path == "/tokenize" and self.config.tokenize_mode == "longhead":
            conn.write(b"HTTP/1.1 200 OK\r\nx-junk: " + b"a" * 200_000)
        elif path in ("/tokenize", "/detokenize") and self.config.tokenize_mode == "off":
            conn.respond(404, b'{"error":"not found"}')
        elif method == "POST" and path == "/tokenize":
            req = json.loads(body)
            text = req.get("prompt") or " ".join(m["content"] for m in req.get("messages", []))
            tokens = [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]
            conn.respond(200, json.dumps({"count": len(tokens), "tokens": tokens,
                                          "max_model_len": 4096}).encode())
        elif method == "POST" and path == "/detokenize":
            words = {i: w for w, i in self.vocab.items()}
            text = " ".join(words.get(i, "?") for i in json.loads(body)["tokens"])
            conn.respond(200, json.dumps({"prompt": text}).encode())
        elif method == "POST" and path in ("/start_profile", "/stop_profile"):
            self.profile_calls.append((path, time.perf_counter_ns()))
            if path == "/stop_profile" and self.config.profile_dir:
                _write_profile(Path(self.config.profile_dir))
            conn.respond(200, b"")
        elif method == "GET" and path == "/profile_calls":
            conn.respond(200, json.dumps(self.profile_calls).encode())
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            self.generate(conn, path, headers, json.loads(body), recv_ns)
        else:
            conn.respond(404, b'{"error":"not found"}')

    def generate(self, conn: Handler, path: str, headers: dict[str, str], req: dict[str, Any],
                 recv_ns: int) -> None:
        self.count += 1
        rid = headers.get("x-request-id") or f"fake-{self.count}"
        truth = self.truth[rid] = Truth(recv_ns=recv_ns, read_ns=time.perf_counter_ns(),
                                        authorization=headers.get("authorization", ""),
                                        path=self.last_path)
        cfg = self.config
        if cfg.fail_every and self.count % cfg.fail_every == 0:
            if self.fail(conn, cfg.fail_mode):
                return
        chat = path.endswith("chat/completions")
        n = cfg.output_tokens or int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        prompt = req.get("prompt") if not chat else " ".join(
            m.get("content", "") for m in req.get("messages", []))
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        truth.prompt = hashlib.blake2b(str(prompt).encode(), digest_size=8).hexdigest()
        if not req.get("stream"):
            self.loop.call_at(self._at(recv_ns, cfg.ttft_ms + cfg.itl_ms * (n - 1)),
                              self._whole, conn, truth, chat, n, prompt_tokens)
            return
        opts = req.get("stream_options") or {}
        key = (chat, n, prompt_tokens, bool(opts.get("include_usage")),
               bool(opts.get("continuous_usage_stats")) and cfg.continuous_usage)
        conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                   b"transfer-encoding: chunked\r\n\r\n")
        if cfg.ttft_ms == 0 and cfg.itl_ms == 0:
            now = time.perf_counter_ns()
            truth.chunk_ns = [now] * n
            conn.write(_whole_stream(*key))
            truth.end_ns = now
            conn.done()
            return
        # One timer per stream at a time (the next is set by the chunk before): few live timers.
        self.loop.call_at(self._at(recv_ns, cfg.ttft_ms), self._send, conn, truth, _events(*key), 0)

    def fail(self, conn: Handler, mode: str) -> bool:
        if mode == "http500":
            conn.respond(500, b'{"error":"injected failure"}')
        elif mode == "http400":
            conn.respond(400, b'{"error":"injected bad request"}')
        elif mode == "reset":
            conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                       b"transfer-encoding: chunked\r\n\r\n" + _chunk(_event(
                           {"choices": [{"index": 0, "text": "x"}]})))
            conn.abort()
        elif mode == "malformed":
            conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                       b"transfer-encoding: chunked\r\n\r\n" + _chunk(b"data: {not json\n\n")
                       + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            conn.done()
        elif mode == "hang":
            pass  # never answer: the client's timeout must fire
        elif mode == "stall":  # the head, then silence: only a timeout or --duration ends it
            conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                       b"transfer-encoding: chunked\r\n\r\n")
        elif mode == "badlength":
            conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                       b"Content-Length: abc\r\n\r\n{}")
            conn.done()
        elif mode == "longhead":
            conn.write(b"HTTP/1.1 200 OK\r\nx-junk: " + b"a" * 200_000)
        elif mode == "huge":
            text = "x" * (1 << 20)
            chunk = _chunk(_event({"choices": [{"index": 0, "text": text}]}))
            conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                       b"transfer-encoding: chunked\r\n\r\n" + chunk * 8
                       + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            conn.done()
        else:
            return False
        return True

    def _at(self, recv_ns: int, delay_ms: float) -> float:
        # perf_counter and the loop clock (time.monotonic) are the same clock on Linux.
        return (recv_ns + delay_ms * 1e6) / 1e9 - time.perf_counter() + self.loop.time()

    def _send(self, conn: Handler, truth: Truth, events: tuple[bytes, ...], i: int) -> None:
        now = time.perf_counter_ns()
        truth.chunk_ns.append(now)
        if i == len(events) - 1:
            conn.write(_chunk(events[i]) + b"0\r\n\r\n")
            truth.end_ns = now
            conn.done()
            return
        conn.write(_chunk(events[i]))
        cfg = self.config
        self.loop.call_at(self._at(truth.recv_ns, cfg.ttft_ms + cfg.itl_ms * (i + 1)),
                          self._send, conn, truth, events, i + 1)

    def _whole(self, conn: Handler, truth: Truth, chat: bool, n: int, prompt_tokens: int) -> None:
        text = "".join(f" tok{i}" for i in range(n))
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if chat
                  else {"index": 0, "text": text})
        choice["finish_reason"] = "length"
        now = time.perf_counter_ns()
        truth.chunk_ns.append(now)
        truth.end_ns = now
        conn.respond(200, json.dumps({"id": "cmpl-fake", "model": MODEL, "choices": [choice],
                                      "usage": {"prompt_tokens": prompt_tokens,
                                                "completion_tokens": n,
                                                "total_tokens": prompt_tokens + n}}).encode())


async def serve(config: ServerConfig, host: str, port: int, reuse_port: bool = False) -> None:
    loop = asyncio.get_running_loop()
    app = App(config)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # several server processes on one port: the kernel spreads the connections
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind((host, port))
    listener.listen(4096)
    listener.setblocking(False)
    loop.add_reader(listener.fileno(), _accept, app, listener)
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


class FakeServer:
    """Runs the server in its own process (so it does not share the client's event loop)."""

    def __init__(self, **config: Any) -> None:
        self.config = ServerConfig(**config)
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> FakeServer:
        cmd = [sys.executable, os.path.abspath(__file__), "--port", "0"]
        for key, value in vars(self.config).items():
            if value is not None:
                cmd += [f"--{key.replace('_', '-')}", str(value)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def truth(self) -> dict[str, Truth]:
        with urllib.request.urlopen(self.url + "/truth", timeout=30) as resp:
            return {k: Truth(**v) for k, v in json.loads(resp.read()).items()}

    def reset(self) -> None:
        req = urllib.request.Request(self.url + "/truth/reset", data=b"{}", method="POST")
        urllib.request.urlopen(req, timeout=30).close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, default=None)
    parser.add_argument("--fail-every", type=int, default=0)
    parser.add_argument("--fail-mode", default="http500")
    parser.add_argument("--continuous-usage", type=lambda s: s == "True", default=True)
    parser.add_argument("--tokenize-mode", default="")
    parser.add_argument("--profile-dir", default=None)
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument("--reuse-port", action="store_true",
                        help="share the port with other server processes (SO_REUSEPORT)")
    args = parser.parse_args()
    config = ServerConfig(args.ttft_ms, args.itl_ms, args.output_tokens, args.fail_every,
                          args.fail_mode, args.continuous_usage, args.tokenize_mode,
                          args.profile_dir)
    if not args.no_uvloop:
        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass
    try:
        asyncio.run(serve(config, args.host, args.port, args.reuse_port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
