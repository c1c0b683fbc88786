"""The proxy against tests/fakeserver.py, where exact, known timing is the point: chunks are
passed on as they come, an unreachable upstream is a 502/503 with the reason, a queued client
that leaves never reaches the upstream, and the CLI refuses bad flags in one line."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import aiohttp
import orjson
import pytest

from fakeserver import FakeServer
from latscope.cli.main import main
from latscope.gateway import running_gateway
from latscope.server.metrics import parse_metrics_text
from latscope.server.target import free_port


def _body(max_tokens: int) -> dict:
    return {"model": "fake-model", "prompt": "a b c", "max_tokens": max_tokens, "stream": True}


async def _post(url: str, body: dict, request_id: str = "r") -> tuple[int, bytes, list[float]]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/completions", json=body,
                                headers={"x-request-id": request_id}) as resp:
            pieces, times = [], []
            async for piece in resp.content.iter_any():
                pieces.append(piece)
                times.append(time.perf_counter())
            return resp.status, b"".join(pieces), times


def _metrics(url: str):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return parse_metrics_text(resp.read().decode())


@pytest.fixture(scope="module")
def slow_server():
    with FakeServer(ttft_ms=20, itl_ms=20) as srv:
        yield srv


async def test_chunks_are_passed_on_as_they_come(slow_server):
    # the fake server writes 20 chunks 20 ms apart: buffering anywhere would bunch them up
    with running_gateway(slow_server.url, max_inflight=2, mode="thread") as url:
        status, body, times = await _post(url, _body(20))
    assert status == 200
    assert body.count(b"data: ") == 21  # 20 tokens and [DONE]
    assert len(times) >= 10
    assert times[-1] - times[0] > 0.25  # the truth is 0.38 s


async def test_unreachable_upstream_is_502_and_health_503_with_the_reason():
    dead = f"http://127.0.0.1:{free_port()}"
    with running_gateway(dead, max_inflight=1, mode="thread") as url:
        status, body, _ = await _post(url, _body(4))
        with pytest.raises(urllib.error.HTTPError) as health:
            urllib.request.urlopen(url + "/health", timeout=10)
        rejected = _metrics(url).value("latscope_gateway_rejected_total",
                                       reason="upstream_unreachable")
    assert status == 502
    message = orjson.loads(body)["error"]["message"]
    assert "unreachable" in message and dead in message
    assert health.value.code == 503
    assert rejected == 2


async def _until_gauges(url: str, timeout: float = 30.0, **want: float):
    """The gateway's metrics page once its gauges show ``want`` (latscope_gateway_ + key)."""
    deadline = time.monotonic() + timeout
    while True:
        page = await asyncio.to_thread(_metrics, url)
        if all(page.value(f"latscope_gateway_{k}") == v for k, v in want.items()):
            return page
        assert time.monotonic() < deadline, f"the gateway never showed {want}"
        await asyncio.sleep(0.01)


async def test_a_queued_client_that_leaves_never_reaches_the_upstream():
    # The busy request holds the only slot for 3 s of server TTFT; each step waits on the
    # gateway's own gauges, not on a fixed sleep (0.2 s sleeps raced a loaded box: the leaver
    # was not queued yet when the queue was read).
    with FakeServer(ttft_ms=3000, itl_ms=1) as srv:
        with running_gateway(srv.url, max_inflight=1, mode="thread") as url:
            busy = asyncio.create_task(_post(url, _body(2), "busy"))
            await _until_gauges(url, inflight=1)
            leaver = asyncio.create_task(_post(url, _body(2), "leaver"))
            await _until_gauges(url, inflight=1, queue_length=1)
            leaver.cancel()  # closes its connection while it waits in the gateway
            with pytest.raises(asyncio.CancelledError):
                await leaver
            await _until_gauges(url, queue_length=0)
            assert not busy.done(), "the busy request ended before the leaver left"
            assert (await busy)[0] == 200
            page = _metrics(url)  # the leaver left seconds ago: its count is in
        seen = set(srv.truth())
    assert page.value("latscope_gateway_cancelled_total", stage="queued") == 1
    assert "busy" in seen and "leaver" not in seen


def test_other_paths_pass_through_unchanged(slow_server):
    with running_gateway(slow_server.url, max_inflight=1, mode="thread") as url:
        via = urllib.request.urlopen(url + "/v1/models", timeout=10).read()
    direct = urllib.request.urlopen(slow_server.url + "/v1/models", timeout=10).read()
    assert via == direct


@pytest.mark.parametrize("argv, message", [
    (["--upstream", "ftp://x"], "must start with http://"),
    (["--upstream", "http://127.0.0.1:1", "--max-inflight", "lots"], "bad --max-inflight"),
    (["--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:x"], "bad --listen"),
])
def test_cli_refuses_bad_flags_in_one_line(capsys, argv, message):
    assert main(["gateway", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_cli_reports_a_taken_port(capsys):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["gateway", "--upstream", "http://127.0.0.1:1", "--max-inflight", "1",
                     "--listen", f"127.0.0.1:{port}"]) == 1
    assert "cannot listen" in capsys.readouterr().err
