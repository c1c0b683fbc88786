"""The Prometheus client's faults, each one line naming the cause, the token never in it."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from prom_replay import Replayer, serve

from latscope.errors import ConfigError
from latscope.fleet.prometheus import PrometheusClient, PrometheusError, read_token_file
from latscope.fleet.window import WindowSpec, read_window


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spec() -> WindowSpec:
    return WindowSpec(start=1000.0, end=1060.0, step=None, selector='job="vllm"')


def test_an_unreachable_prometheus_is_one_line_naming_it():
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(PrometheusError) as err:
        read_window(PrometheusClient(url), _spec())
    text = str(err.value)
    assert text == f"Prometheus at {url} is unreachable: connection refused"
    assert "\n" not in text and "Traceback" not in text


def test_a_prometheus_that_never_answers_times_out_in_one_line():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts, never answers
    try:
        client = PrometheusClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.5)
        with pytest.raises(PrometheusError, match=r"did not answer /api/v1/series within 0.5 s"):
            read_window(client, _spec())
    finally:
        listener.close()


def test_a_password_in_the_url_is_never_shown():
    client = PrometheusClient(f"http://bob:hunter2@127.0.0.1:{_closed_port()}")
    with pytest.raises(PrometheusError) as err:
        read_window(client, _spec())
    assert "hunter2" not in str(err.value) and "bob:<redacted>@" in str(err.value)
    assert "hunter2" not in repr(client)


def test_a_server_that_is_not_prometheus_is_named_so():
    replayer = Replayer([{"path": "/api/v1/series", "params": {
        "match[]": '{__name__=~"vllm:.+", job="vllm"}', "start": "1000.000",
        "end": "1060.000"}, "status": 200, "body": "<html>grafana</html>"}])
    server, url = serve(replayer)
    try:
        with pytest.raises(PrometheusError, match=r"not its JSON \(is this a Prometheus"):
            read_window(PrometheusClient(url), _spec())
    finally:
        server.shutdown()


def test_bad_urls_and_token_files_are_refused_before_any_request(tmp_path):
    with pytest.raises(ConfigError, match="give an http"):
        PrometheusClient("prometheus:9090")
    with pytest.raises(ConfigError, match="no such file|No such file"):
        read_token_file(tmp_path / "missing")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        read_token_file(tmp_path / "empty")
    (tmp_path / "two").write_text("abc def\n")
    with pytest.raises(ConfigError, match="whitespace inside") as err:
        read_token_file(tmp_path / "two")
    assert "abc" not in str(err.value)
    (tmp_path / "ok").write_text("  s3cr3t-token\n")
    assert read_token_file(tmp_path / "ok") == "s3cr3t-token"


def test_a_step_past_prometheus_resolution_is_refused_before_asking():
    client = PrometheusClient(f"http://127.0.0.1:{_closed_port()}")

    async def ask() -> None:
        async with client.session() as session:
            await session.query_range("up", 0.0, 86400.0 * 30, 1.0)

    with pytest.raises(ConfigError, match="11000"):
        asyncio.run(ask())


def test_the_client_answers_concurrent_queries_over_one_session():
    # several queries in flight at once share one connection pool and all come back
    hits = []
    lock = threading.Lock()

    class Counting(Replayer):
        def answer(self, path, params):
            with lock:
                hits.append(params["query"])
            return 200, b'{"status":"success","data":{"resultType":"vector","result":[]}}'

    server, url = serve(Counting([]))
    try:
        async def ask() -> list:
            async with PrometheusClient(url).session() as session:
                return await asyncio.gather(*(session.query(f"up{i}", 1.0) for i in range(10)))

        assert asyncio.run(ask()) == [[] for _ in range(10)]
        assert sorted(hits) == sorted(f"up{i}" for i in range(10))
    finally:
        server.shutdown()
