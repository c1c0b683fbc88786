"""A response head's quick path (the usual streaming head) reads what the header loop reads."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import latscope.load.client as client
from latscope.load.client import _Exchange

_LINES = [
    b"Transfer-Encoding: chunked", b"transfer-encoding: chunked", b"transfer-encoding:chunked",
    b"Transfer-Encoding: gzip, chunked", b"transfer-encoding: gzip", b" transfer-encoding: chunked",
    b"Content-Length: 12", b"content-length: 0", b"content-length: x1", b"Content-Length : 7",
    b"Connection: close", b"connection: keep-alive", b"x-note: connection", b" connection: close",
    b"content-type: text/event-stream", b"date: Sun, 06 Dec 2026 07:00:00 GMT",
    b"server: uvicorn", b"x-request-id: latscope-1-2", b"x-transfer-encoding: chunked",
]
_STATUS = [b"HTTP/1.1 200 OK", b"HTTP/1.1 404 Not Found", b"HTTP/1.0 200", b"HTTP/1.1 2x0 OK",
           b"HTTP/1.1"]


def _read(head: bytes) -> tuple:
    loop = asyncio.new_event_loop()
    try:
        exchange = _Exchange(loop.create_future(), 1 << 20)
        exchange._read_head(head)
        return (exchange.status, exchange.mode, exchange.keep_alive, exchange.remaining,
                exchange.error_kind, exchange.error)
    finally:
        loop.close()


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_STATUS), st.lists(st.sampled_from(_LINES), max_size=6))
def test_the_quick_path_reads_every_head_as_the_header_loop_does(status, lines):
    head = b"\r\n".join([status, *lines])
    quick = _read(head)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(client, "_CHUNKED_LINE", b"\x00never in a head\x00")  # the loop alone
        assert quick == _read(head)


def test_the_usual_streaming_head_is_chunked_and_kept_alive():
    head = (b"HTTP/1.1 200 OK\r\ndate: Sun, 06 Dec 2026 07:00:00 GMT\r\nserver: uvicorn\r\n"
            b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked")
    status, mode, keep_alive, *_ = _read(head)
    assert (status, mode, keep_alive) == (200, "chunked", True)
