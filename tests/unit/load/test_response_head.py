"""A response head's quick path (the usual streaming head) reads what the header loop reads."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
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


def _read_by_the_loop(head: bytes) -> tuple:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(client, "usual_head", lambda head: None)  # no quick path: the loop
        return _read(head)


@pytest.fixture
def quick():
    """The quick path under test (``client.usual_head``; a C reader of it was dropped: no real
    run showed its ~0.9 us a response)."""
    return client.usual_head


_PIECES = st.one_of(st.sampled_from(_LINES), st.binary(max_size=12),
                    st.sampled_from([b"\r", b"\n", b" ", b"\t", b"HTTP/1.1 ", b"chunked"]))


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # (set once, kept)
@given(head=st.builds(lambda status, lines: b"\r\n".join([status, *lines]),
                      st.sampled_from(_STATUS), st.lists(st.sampled_from(_LINES), max_size=6)))
def test_the_quick_paths_read_every_head_as_the_header_loop_does(quick, head):
    assert _read(head) == _read_by_the_loop(head)


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # (set once, kept)
@given(head=st.builds(lambda parts: b"".join(parts), st.lists(_PIECES, max_size=10)),
       status=st.sampled_from([*_STATUS, b"HTTP/1.1 200\r", b"HTTP/1.1 200\rx", b"HTTP/1.0 099",
                               b"http/1.1 200 OK", b"HTTP/1.1 20", b""]))
def test_odd_bytes_in_a_head_read_as_the_header_loop_reads_them(quick, status, head):
    head = status + b"\r\n" + head if status else head
    assert _read(head) == _read_by_the_loop(head)


def test_the_quick_reader_answers_the_usual_head_and_declines_the_rest():
    usual = client.usual_head
    assert usual(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nx-id: 1") == 200
    assert usual(b"HTTP/1.0 503\r\ntransfer-encoding: chunked") == 503
    for declined in (b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip",
                     b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nConnection: close",
                     b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked",
                     b"HTTP/1.1 200\rx\r\ntransfer-encoding: chunked", b"HTTP/2 200", b""):
        assert usual(declined) is None, declined


def test_the_usual_streaming_head_is_chunked_and_kept_alive():
    head = (b"HTTP/1.1 200 OK\r\ndate: Sun, 06 Dec 2026 07:00:00 GMT\r\nserver: uvicorn\r\n"
            b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked")
    status, mode, keep_alive, *_ = _read(head)
    assert (status, mode, keep_alive) == (200, "chunked", True)
