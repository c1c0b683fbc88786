"""Session-wide real vLLM servers for the integration tests: those the selected tests use, all
started at the first ask, two at a time (``SessionServers``).

- ``vllm_target``: the tiny model with latscope's default flags.
- ``vllm_target_constrained``: ``--max-num-seqs 2 --enable-log-requests``,
  ``VLLM_LOGGING_LEVEL=DEBUG`` and ``VLLM_LOG_STATS_INTERVAL=2``, so that queueing appears under
  light load and the log carries per-request and per-step lines; it also exports a span per
  request to an OTLP endpoint on a loopback port chosen up front (``.otlp_endpoint``), where the
  OTLP tests listen, each with its own receiver, the way a user points a remote server at
  latscope. Nothing listens there in between: the exporter drops those spans after its 1 s
  timeout (its warnings go to the server's log, not in vLLM's format, so no log rule reads
  them) and delivers the next ones within a second of a receiver binding the port (measured:
  0.6 s). One server fewer than a traced one of its own, ~30 s a run (#22).
- ``vllm_target_kv``: ``--num-gpu-blocks-override 17``, a KV cache too small for the load the
  kv tests send: one server for the active and the passive diagnosis of the same fault.
- ``vllm_target_twin``: a second server with the default flags, the fleet's third replica.

All are ``LocalTarget``s (``.url``, ``.model_name``, ``.log_path``, ``.tokenizer_dir``, ``.pid``),
stopped (whole process group) at session end. If vLLM is not importable the test FAILS: CI
installs it, so a missing vLLM is a broken setup, not a reason to skip.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import independent_traffic
import pytest

from latscope.server.target import LocalTarget, free_port
from latscope.server.tinymodel import ensure_tiny_model

# Every vLLM these tests start (the session servers, diagnose's and tune's own, the fleet's
# replicas) runs its model in its engine-core process instead of a third process: vLLM's CPU
# build otherwise spawns a worker that imports torch and vLLM once more. Measured here, a start
# to /health of the tiny model: 110.6 s -> 63.5 s on this 2-core box under other work; the same
# engine, one OMP thread bound as before (its log says so). Users' servers are not touched: only
# the environment of this test session sets it.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

CONSTRAINED_ARGS = ("--max-num-seqs", "2", "--enable-log-requests")
# stats lines every 2 s, not 10: a log rule reads the batch at those instants, and the two or
# three lines of a 24 s run once showed no full batch (CI: a queue at Running < 2 only)
CONSTRAINED_ENV = {"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_LOG_STATS_INTERVAL": "2",
                   # an export nobody receives is given up after 1 s, not retried for 10: its
                   # stop at the session's end took 14.8 s so, 1.3 s with it (measured here)
                   "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1"}


# 17 blocks of 128 tokens: requests of two blocks (prompt + output) fit eight at a time, so the
# kv tests' loads are admitted on their first block and preempted when they need the second
KV_STARVED_ARGS = ("--num-gpu-blocks-override", "17")


SERVERS = ("vllm_target", "vllm_target_constrained", "vllm_target_kv", "vllm_target_twin")


def _server_kwargs() -> dict[str, dict]:
    """Each session server's ``LocalTarget`` arguments, by the fixture that yields it."""
    return {
        "vllm_target": {},
        "vllm_target_constrained": {
            "serve_args": CONSTRAINED_ARGS, "env": CONSTRAINED_ENV,
            "otlp_endpoint": f"http://127.0.0.1:{free_port()}/v1/traces"},
        "vllm_target_kv": {"serve_args": KV_STARVED_ARGS},
        "vllm_target_twin": {},  # the fleet's second default replica
    }


class SessionServers:
    """The session servers the selected tests use, all started at the first ask, two at a time
    (a start is one core busy for ~33 s; on a 2-core box four take 72-87 s so, ~132 s one after
    another), and waited for before any test goes on, so that no test is timed beside a start.
    Stopped (each its process group) at session end."""

    def __init__(self, names: list[str], tmp_path_factory: pytest.TempPathFactory,
                 traffic: bool = False) -> None:
        self.names = names
        self.traffic = traffic
        self.tmp_path_factory = tmp_path_factory
        self.targets: dict[str, LocalTarget] = {}
        self.failed: dict[str, BaseException] = {}
        self.started = False

    def get(self, name: str) -> LocalTarget:
        if importlib.util.find_spec("vllm") is None:
            pytest.fail("vLLM is not installed in this Python: run "
                        "`bash scripts/install.sh test`")
        if not self.started:
            self.started = True
            if self.traffic:  # vllm bench serve's imports (its forkserver's) beside the starts
                independent_traffic.warm()
            self._start_all([name] + [n for n in self.names if n != name])
        if name in self.failed:
            raise self.failed[name]
        if name not in self.targets:  # not among the selected tests' servers: one more start
            self._start_all([name])
        return self.targets[name]

    def _start_all(self, names: list[str]) -> None:
        kwargs = _server_kwargs()
        ensure_tiny_model()  # built once here, not by two threads at once

        def start(name: str) -> None:
            target = LocalTarget(log_dir=self.tmp_path_factory.mktemp(name), **kwargs[name])
            try:
                self.targets[name] = target.start()
            except BaseException as exc:  # raised to the tests that ask for it
                self.failed[name] = exc

        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="vllm-start") as pool:
            list(pool.map(start, names))

    def stop(self) -> None:
        for target in self.targets.values():
            target.stop()


@pytest.fixture(scope="session")
def session_servers(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionServers]:
    asked = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    servers = SessionServers(sorted(asked & set(SERVERS)), tmp_path_factory,
                             traffic="traffic_generator" in asked)
    try:
        yield servers
    finally:
        servers.stop()


def _session_server(name: str):
    """The session fixture ``name``: that server, from the session's ``SessionServers``."""
    @pytest.fixture(scope="session", name=name)
    def server(session_servers: SessionServers) -> LocalTarget:
        return session_servers.get(name)
    return server


vllm_target = _session_server("vllm_target")
vllm_target_constrained = _session_server("vllm_target_constrained")
vllm_target_kv = _session_server("vllm_target_kv")
vllm_target_twin = _session_server("vllm_target_twin")


@pytest.fixture(scope="session")
def traffic_generator(session_servers: SessionServers) -> None:
    """vllm bench serve's forkserver, importing (tests/independent_traffic.py): asked for by the
    tests that send independent traffic, so that it imports beside the session's vLLM starts."""
    independent_traffic.warm()
