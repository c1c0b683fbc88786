"""The gateway in front of the real local vLLM (session fixture ``vllm_target``).

Pass-through is byte-exact (what the client gets is what vLLM sent, seen by a tap); with
the in-flight limit at 1 a short request queued behind long ones is served first, and aging lets
a long one through ahead of a short one that came too late; a full queue answers 429; a client
that leaves cancels its vLLM request, as vLLM's own request log shows (the
``vllm_target_constrained`` server, which logs requests).

``LATSCOPE_GATEWAY_TEST_UPSTREAM=http://127.0.0.1:PORT`` points the tests at a vLLM already
running (``latscope target up``) instead of starting one, for quicker local iterations.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
import urllib.request
import uuid
from pathlib import Path

import aiohttp
import orjson
import pytest

from latscope.gateway import running_gateway
from latscope.server.metrics import parse_metrics_text

pytestmark = pytest.mark.integration

# The long request's cost (~1510 tokens: prompt + max_tokens), which sets how long aging waits
LONG_TOKENS = 1500
MAX_OUTPUT = 1900  # the target's max_model_len is 2048 (prompts here are ~10 tokens)


@pytest.fixture(scope="module")
def upstream(request: pytest.FixtureRequest) -> str:
    url = os.environ.get("LATSCOPE_GATEWAY_TEST_UPSTREAM")
    return url or request.getfixturevalue("vllm_target").url


@pytest.fixture(scope="module")
def model(upstream: str) -> str:
    with urllib.request.urlopen(upstream + "/v1/models", timeout=30) as resp:
        return orjson.loads(resp.read())["data"][0]["id"]


def _body(model: str, max_tokens: int, prompt: str = "the cat sat on the mat", **extra) -> dict:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "temperature": 0, "ignore_eos": True, **extra}


async def _stream(url: str, body: dict, path: str = "/v1/completions",
                  request_id: str | None = None) -> tuple[int, bytes, list[float]]:
    """Status, the raw body and the arrival time of every piece read."""
    headers = {"x-request-id": request_id} if request_id else {}
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.post(url + path, json=body, headers=headers) as resp:
            pieces, times = [], []
            async for piece in resp.content.iter_any():
                pieces.append(piece)
                times.append(time.perf_counter())
            return resp.status, b"".join(pieces), times


def _metrics(url: str):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        return parse_metrics_text(resp.read().decode())


async def _gateway_holds(url: str, inflight: int, queued: int, timeout: float = 10.0) -> None:
    """Wait until the gateway's own gauges show this state: fixed sleeps raced the decode speed
    of the box (a CI machine decoded 1900 tokens before a 1 s sleep ended, and nothing was
    queued any more when the request meant to be refused arrived)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = await asyncio.to_thread(_metrics, url)
        if (metrics.value("latscope_gateway_inflight") == inflight
                and metrics.value("latscope_gateway_queue_length") == queued):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the gateway never held {inflight} in flight and {queued} queued")


class Tap:
    """A TCP pass-through between the gateway and vLLM that keeps every byte each way, so the
    client's bytes can be held against what vLLM really sent for the very same request (two
    separate generations can differ: the CPU kernels' reductions are not run-to-run exact, and
    the random-weight model's logits are near ties)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.to_upstream = bytearray()
        self.from_upstream = bytearray()
        self.pipes: list[asyncio.Task] = []

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._pipe, "127.0.0.1", 0)
        return "http://127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        if self.pipes:  # the gateway has stopped: its connections end, so do their pipes
            _, pending = await asyncio.wait(self.pipes, timeout=5)
            for task in pending:
                task.cancel()

    async def _pipe(self, reader, writer) -> None:
        self.pipes.append(asyncio.current_task())
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        connection: dict = {}  # what the hooks note about this one connection

        async def copy(src, dst, keep: bytearray, hook) -> None:
            while data := await src.read(65536):
                keep += data
                await hook(connection, data)
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(copy(reader, up_writer, self.to_upstream, self._sent_up),
                             copy(up_reader, writer, self.from_upstream, self._sent_down),
                             return_exceptions=True)

    async def _sent_up(self, connection: dict, data: bytes) -> None:
        """Called with each piece before it goes to vLLM (a subclass may note or hold it)."""

    async def _sent_down(self, connection: dict, data: bytes) -> None:
        """Called with each piece of vLLM's answer before it goes back."""


def _http_body(raw: bytes) -> bytes:
    """The body of one HTTP/1.1 message (chunked or not), framing removed."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return rest
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(body)
        body += rest[:size]
        rest = rest[size + 2:]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_streaming_is_byte_exact(upstream, model, path):
    body = _body(model, 24)
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": body.pop("prompt")}]
    tap = Tap(upstream)
    async with tap as tapped:
        with running_gateway(tapped, policy="sjf", max_inflight=4, mode="thread",
                             upstream_priority="off", watch_waiting=False) as url:
            status, proxied, _ = await _stream(url, body, path, request_id="gw-exact")
    assert status == 200
    # a stream to its end (vLLM packs several tokens into one event when it falls behind, so the
    # number of events varies; that chunks are passed on as they come is timed in
    # tests/unit/gateway against the fake server)
    assert proxied.count(b"data: ") >= 2 and proxied.endswith(b"data: [DONE]\n\n")
    assert proxied == _http_body(bytes(tap.from_upstream))
    assert orjson.loads(_http_body(bytes(tap.to_upstream))) == body


class HoldingTap(Tap):
    """A tap that holds vLLM's answer to the request carrying ``marker`` until ``release`` is
    set: that request holds the gateway's only slot for exactly as long as a test needs, however
    fast the box decodes (fixed sleeps raced it: a quiet box ended a 1500-token request before
    the last arrival, a loaded one was late with a /tokenize)."""

    def __init__(self, upstream: str, marker: bytes) -> None:
        super().__init__(upstream)
        self.marker = marker
        self.holding = asyncio.Event()  # the marked request has gone upstream
        self.release = asyncio.Event()

    async def _sent_up(self, connection: dict, data: bytes) -> None:
        if self.marker in data:
            connection["held"] = True
            self.holding.set()

    async def _sent_down(self, connection: dict, data: bytes) -> None:
        if connection.get("held"):
            await self.release.wait()


@pytest.mark.parametrize("policy, expected", [("sjf", ["short1", "long", "short2"]),
                                              ("fcfs", ["long", "short1", "short2"])])
async def test_limit_one_serves_short_first_and_ages_long(upstream, model, policy, expected):
    # aging: deadline = arrival + cost / 5000 tokens/s; the long request (~1510 tokens) is due
    # ~0.3 s after it arrived, so it passes a short one (~10 tokens) only when the short one
    # arrives more than ~0.3 s after it: short1 (0.1 s later) still goes first, short2 (0.8 s
    # later) after the long one even under sjf. The busy request holds the only slot (its answer
    # held by the tap) until all three wait in the gateway.
    tap = HoldingTap(upstream, b"hold the only slot")
    async with tap as tapped:
        # no start-up probe through the tap: its loop is this test's, blocked while the
        # gateway starts (as in the byte-exact test)
        with running_gateway(tapped, policy=policy, max_inflight=1, mode="thread",
                             aging_factor=1.0, aging_rate=5000.0, upstream_priority="off",
                             watch_waiting=False) as url:
            finished: list[str] = []

            async def one(name: str, max_tokens: int, **body: str) -> None:
                status, _, _ = await _stream(url, _body(model, max_tokens, **body))
                assert status == 200
                finished.append(name)

            tasks = [asyncio.create_task(one("busy", 8, prompt="hold the only slot"))]
            await asyncio.wait_for(tap.holding.wait(), 30)
            for name, tokens, pause in (("long", LONG_TOKENS, 0.1), ("short1", 4, 0.7),
                                        ("short2", 4, 0.0)):
                tasks.append(asyncio.create_task(one(name, tokens)))
                await _gateway_holds(url, inflight=1, queued=len(tasks) - 1)
                await asyncio.sleep(pause)
            tap.release.set()
            await asyncio.gather(*tasks)
            waited = _metrics(url).value("latscope_gateway_queue_wait_seconds_count")
    assert finished[0] == "busy", "the first request holds the only slot"
    assert finished[1:] == expected
    assert waited == 3


async def test_full_queue_answers_429_with_retry_after(upstream, model):
    # the busy request's answer is held by the tap: decoding 1900 tokens to hold the slot raced
    # the box (a CI machine ended it before the gateway's gauges were read once)
    tap = HoldingTap(upstream, b"hold the only slot")
    async with tap as tapped:
        with running_gateway(tapped, policy="sjf", max_inflight=1, max_queue=1, mode="thread",
                             upstream_priority="off", watch_waiting=False) as url:
            busy = asyncio.create_task(_stream(url, _body(model, 8, prompt="hold the only slot")))
            await asyncio.wait_for(tap.holding.wait(), 30)
            queued = asyncio.create_task(_stream(url, _body(model, 4)))
            await _gateway_holds(url, inflight=1, queued=1)
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/v1/completions", json=_body(model, 4)) as resp:
                    status, retry_after = resp.status, resp.headers.get("Retry-After")
                    error = (await resp.json())["error"]
            tap.release.set()
            assert [r[0] for r in await asyncio.gather(busy, queued)] == [200, 200]
            rejected = _metrics(url).value("latscope_gateway_rejected_total", reason="queue_full")
    assert status == 429
    assert retry_after is not None and int(retry_after) >= 1
    assert "queue is full" in error["message"]
    assert rejected == 1


async def test_priority_field_is_probed_and_accepted(upstream, model):
    # vLLM 0.32 takes `priority` under fcfs too (and ignores it there): the probe turns it on,
    # and requests carrying it succeed
    with running_gateway(upstream, policy="sjf", max_inflight=1, mode="thread") as url:
        results = await asyncio.gather(*(_stream(url, _body(model, 8)) for _ in range(3)))
        enabled = _metrics(url).value("latscope_gateway_upstream_priority_enabled")
    assert [r[0] for r in results] == [200, 200, 200]
    assert enabled == 1


def _until_upstream_running(upstream: str, running, timeout: float = 60.0) -> None:
    """Poll vLLM's running gauge until ``running(value)`` holds."""
    deadline = time.monotonic() + timeout
    while not running(_metrics(upstream).value("vllm:num_requests_running") or 0.0):
        assert time.monotonic() < deadline, "vLLM's running gauge never reached the state"
        time.sleep(0.005)


def _until_logged(log: Path, offset: int, pattern: str, timeout: float = 60.0) -> str:
    """Poll the server's log, from byte ``offset`` on, until a line matches ``pattern``."""
    deadline = time.monotonic() + timeout
    regex = re.compile(pattern)
    while True:
        with log.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
        if found := regex.search(text):
            return found.group(0)
        assert time.monotonic() < deadline, f"vLLM never logged {pattern!r} in {timeout} s"
        time.sleep(0.01)


def test_client_disconnect_cancels_the_vllm_request(vllm_target_constrained):
    # The events come from vLLM's own request log (the constrained session server runs with
    # --enable-log-requests), by the request's X-Request-Id: "Added request" (it is in the
    # engine), then the abort. Its /metrics cannot show them: it answers only between streamed
    # chunks (a scrape sent during this stream came back after it ended, gauge 0), and
    # request_success_total{finished_reason="abort"} did not count it within 60 s. Waiting for
    # the first token through the gateway instead let a fast CI box decode all 1900 tokens
    # before the abort arrived (1900.0 < 1900).
    target = vllm_target_constrained
    upstream, long_run = target.url, MAX_OUTPUT  # 1-3 s of decoding here, ~0.5 s on a fast box
    request_id = f"latscope-disconnect-{uuid.uuid4().hex}"
    offset = target.log_path.stat().st_size
    before = _metrics(upstream).value("vllm:generation_tokens_total") or 0.0
    with running_gateway(upstream, policy="sjf", max_inflight=4, mode="thread",
                         upstream_priority="off") as url:
        host, port = url.removeprefix("http://").split(":")
        payload = orjson.dumps(_body(target.model_name, long_run))
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (request_id.encode(), len(payload), payload))
            _until_logged(target.log_path, offset, rf"Added request \S*{request_id}")
            left = time.perf_counter()
        # AsyncLLM logs both when a client's disconnect cancels generate(): "Aborted request(s)
        # <internal id>." and "Request <id> aborted."
        aborted = _until_logged(target.log_path, offset, rf"Aborted request\(s\) \S*{request_id}"
                                rf"|Request \S*{request_id}\S* aborted")
        stopped_s = time.perf_counter() - left
        _until_upstream_running(upstream, lambda n: n == 0, timeout=30)
        deadline = time.monotonic() + 30  # the count follows the handler's cancellation
        while not (cancelled := _metrics(url).value("latscope_gateway_cancelled_total",
                                                    stage="upstream")):
            assert time.monotonic() < deadline, "the gateway never counted the cancellation"
            time.sleep(0.01)
    generated = (_metrics(upstream).value("vllm:generation_tokens_total") or 0.0) - before
    # aborted before the end, however fast the box decodes
    assert generated < long_run, f"vLLM logged {aborted!r} {stopped_s:.3f} s after the client left"
    assert cancelled == 1
