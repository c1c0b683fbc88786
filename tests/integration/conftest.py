"""Session-wide real vLLM servers for the integration tests, started only when a test asks.

- ``vllm_target``: the tiny model with latscope's default flags.
- ``vllm_target_constrained``: ``--max-num-seqs 2 --enable-log-requests``,
  ``VLLM_LOGGING_LEVEL=DEBUG`` and ``VLLM_LOG_STATS_INTERVAL=2``, so that queueing appears under
  light load and the log carries per-request and per-step lines; it also exports a span per
  request to an OTLP endpoint on a loopback port chosen up front (``.otlp_endpoint``), where the OTLP
  tests listen, each with its own receiver, the way a user points a remote server at latscope.
  Nothing listens there in between: the exporter drops those spans after a few retries (its
  warnings go to the server's log, not in vLLM's format, so no log rule reads them) and delivers
  the next ones within a second of a receiver binding the port (measured: 0.6 s). One server
  fewer than a traced one of its own, ~30 s a run (#22).

Both are ``LocalTarget``s (``.url``, ``.model_name``, ``.log_path``, ``.tokenizer_dir``, ``.pid``),
stopped (whole process group) at session end. If vLLM is not importable the test FAILS: CI installs
it, so a missing vLLM is a broken setup, not a reason to skip.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

from latscope.server.target import LocalTarget, free_port

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
CONSTRAINED_ENV = {"VLLM_LOGGING_LEVEL": "DEBUG", "VLLM_LOG_STATS_INTERVAL": "2"}


def _started(tmp_path_factory: pytest.TempPathFactory, name: str, **kwargs) -> LocalTarget:
    if importlib.util.find_spec("vllm") is None:
        pytest.fail("vLLM is not installed in this Python: run `bash scripts/install.sh test`")
    target = LocalTarget(log_dir=tmp_path_factory.mktemp(name), **kwargs)
    return target.start()


@pytest.fixture(scope="session")
def vllm_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTarget]:
    target = _started(tmp_path_factory, "vllm_target")
    try:
        yield target
    finally:
        target.stop()


@pytest.fixture(scope="session")
def vllm_target_constrained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTarget]:
    port = free_port()
    target = _started(tmp_path_factory, "vllm_target_constrained",
                      serve_args=CONSTRAINED_ARGS, env=CONSTRAINED_ENV,
                      otlp_endpoint=f"http://127.0.0.1:{port}/v1/traces")
    try:
        yield target
    finally:
        target.stop()
