"""The raw relay against real local HTTP servers: tests/fakeserver.py (one chunk a token, as
vLLM writes them) and an aiohttp server that notices its client leaving. The client side here is
a raw socket, so what is compared is the bytes on the wire, framing included."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from urllib.parse import urlsplit

import aiohttp
import orjson
import pytest
from aiohttp import web

from fakeserver import FakeServer
from latscope.gateway import running_gateway
from latscope.gateway.relay import ChunkedEnd, UpstreamBroke
from latscope.server.metrics import parse_metrics_text

TIMEOUT_S = 30.0


def _completion(tokens: int, stream: bool = True) -> bytes:
    return orjson.dumps({"model": "fake-model", "prompt": "a b c", "max_tokens": tokens,
                         "stream": stream})


async def _exchange(url: str, method: str, path: str, body: bytes = b"") -> tuple[bytes, bytes]:
    """The raw head and body of one answer; a chunked body is read up to its last chunk."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        async with asyncio.timeout(TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
            fields = head.lower()
            if b"transfer-encoding: chunked" in fields:
                data = b""
                while not data.endswith(b"\r\n0\r\n\r\n"):
                    piece = await reader.read(1 << 16)
                    assert piece, "the connection closed before the last chunk"
                    data += piece
            else:
                length = int(fields.split(b"content-length:")[1].split(b"\r\n")[0])
                data = await reader.readexactly(length)
        return head, data
    finally:
        writer.close()


def _status(head: bytes) -> int:
    return int(head.split(b" ", 2)[1])


def _metrics(url: str):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return parse_metrics_text(resp.read().decode())


@pytest.mark.parametrize("tokens", [1, 40])
async def test_a_streamed_body_reaches_the_client_byte_for_byte(tokens):
    with FakeServer(ttft_ms=2, itl_ms=1) as srv:
        with running_gateway(srv.url, max_inflight=4, mode="thread", relay="raw") as url:
            request = ("POST", "/v1/completions", _completion(tokens))
            direct_head, direct = await _exchange(srv.url, *request)
            via_head, via = await _exchange(url, *request)
            again_head, again = await _exchange(url, *request)  # on a pooled connection
    assert _status(direct_head) == _status(via_head) == _status(again_head) == 200
    assert b"transfer-encoding: chunked" in via_head.lower()
    assert direct.count(b"data: ") == tokens + 1
    assert via == direct  # chunk size lines included: nothing re-framed
    assert again == direct


async def test_sized_bodies_and_upstream_errors_pass_through_as_sent():
    # upstream_priority off: its probe would be the fake server's first completion
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=2, fail_mode="http500") as srv:
        with running_gateway(srv.url, max_inflight=4, mode="thread", relay="raw",
                             upstream_priority="off") as url:
            models_direct = await _exchange(srv.url, "GET", "/v1/models")
            models_via = await _exchange(url, "GET", "/v1/models")
            whole = await _exchange(url, "POST", "/v1/completions", _completion(3, False))
            failed = await _exchange(url, "POST", "/v1/completions", _completion(3))
    assert models_via[1] == models_direct[1]
    assert _status(whole[0]) == 200 and orjson.loads(whole[1])["choices"]
    assert _status(failed[0]) == 500
    assert failed[1] == b'{"error":"injected failure"}'


async def test_an_upstream_that_breaks_mid_stream_cuts_the_client_off():
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=1, fail_mode="reset") as srv:
        with running_gateway(srv.url, max_inflight=4, mode="thread", relay="raw") as url:
            async with aiohttp.ClientSession() as session:
                async with session.post(url + "/v1/completions", data=_completion(4)) as resp:
                    assert resp.status == 200
                    with pytest.raises(aiohttp.ClientPayloadError):
                        await resp.read()  # not a clean end: the answer was truncated
            broke = _metrics(url).value("latscope_gateway_rejected_total",
                                        reason="upstream_broke")
    assert broke == 1


@pytest.fixture
def leaving_upstream():
    """An aiohttp server, on a loop of its own thread (the gateway probes it while starting),
    streaming 1000 chunks 10 ms apart; ``left`` is set when its handler sees its client gone
    (aiohttp cancels the handler of a closed connection)."""
    left, ready = threading.Event(), threading.Event()
    loop = asyncio.new_event_loop()
    state: dict = {}

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for i in range(1000):
                await response.write(b"data: %d\n\n" % i)
                await asyncio.sleep(0.01)
        except (asyncio.CancelledError, ConnectionResetError):
            left.set()
            raise
        return response

    async def start() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", handle)
        state["runner"] = runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        state["url"] = "http://%s:%d" % runner.addresses[0][:2]
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    assert ready.wait(TIMEOUT_S)
    yield state["url"], left
    asyncio.run_coroutine_threadsafe(state["runner"].cleanup(), loop).result(TIMEOUT_S)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(TIMEOUT_S)


async def test_a_client_that_leaves_mid_stream_closes_the_upstream_request(leaving_upstream):
    upstream, left = leaving_upstream
    with running_gateway(upstream, max_inflight=4, mode="thread", relay="raw",
                         upstream_priority="off") as url:
        async with aiohttp.ClientSession() as session:
            async with session.post(url + "/v1/completions", data=_completion(1000)) as resp:
                assert (await resp.content.readline()).startswith(b"data: 0")
        # the session is closed: the gateway's client connection with it
        assert await asyncio.to_thread(left.wait, TIMEOUT_S), "the upstream never saw it"
        page = await asyncio.to_thread(_metrics, url)
    assert page.value("latscope_gateway_cancelled_total", stage="upstream") == 1


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_chunked_end_is_found_wherever_the_reads_split():
    body = _chunked(b"data: {\"x\": 1}\n\n", b"a" * 300, b"data: [DONE]\n\n")
    stream = body + b"HTTP/1.1 200 OK\r\n"  # a stray answer after the end is not the body's
    for cut in range(1, len(stream)):
        scanner = ChunkedEnd()
        first = scanner.feed(stream[:cut])
        taken = first if scanner.done else first + scanner.feed(stream[cut:])
        assert scanner.done and taken == len(body), cut


def test_chunked_end_refuses_a_bad_size_line():
    with pytest.raises(UpstreamBroke, match="bad chunk size"):
        ChunkedEnd().feed(b"zz\r\nhello\r\n")
