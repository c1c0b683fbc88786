"""Running a gateway: in the foreground (the CLI), or in front of an upstream for a caller.

``running_gateway(upstream, policy=..., max_inflight=...)`` is a context manager that yields the
gateway's base URL. ``mode="process"`` (the default) runs ``python -m latscope gateway`` as a child
in its own process group, so that its CPU never competes with the caller's load generator for one
interpreter (measurements use it); ``mode="thread"`` runs it on an event loop in a daemon thread of
this process (cheap to start; tests and quick checks).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from latscope.errors import TargetError
from latscope.gateway.config import GatewayConfig
from latscope.gateway.proxy import Gateway

START_TIMEOUT_S = 60.0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (measured faster for the proxy's many small writes), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve(config: GatewayConfig, on_listening: Callable[[Gateway], None] | None = None) -> None:
    """Run until SIGINT/SIGTERM; ``on_listening`` is called once the port is bound."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    gateway = Gateway(config)

    async def main() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await gateway.start()
        try:
            if on_listening is not None:
                on_listening(gateway)
            await stop.wait()
        finally:
            await gateway.stop()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


@contextlib.contextmanager
def running_gateway(upstream: str, *, policy: str = "sjf", max_inflight: int | None = None,
                    mode: str = "process", **options: object) -> Iterator[str]:
    """A gateway in front of ``upstream`` for the duration of the block; yields its URL.

    ``max_inflight=None`` is ``auto``; ``options`` are any other ``GatewayConfig`` fields
    (``ttft_target_ms``, ``max_queue``, ``aging_factor``, ``tokenizer``, ...)."""
    config = GatewayConfig(upstream=upstream, policy=policy, max_inflight=max_inflight,
                           **options)  # type: ignore[arg-type]
    config.validate()
    if mode == "thread":
        with _in_thread(config) as url:
            yield url
    elif mode == "process":
        with _in_process(config) as url:
            yield url
    else:
        raise ValueError(f"mode must be process or thread (got {mode!r})")


@contextlib.contextmanager
def _in_thread(config: GatewayConfig) -> Iterator[str]:
    loop = new_event_loop()
    gateway = Gateway(config)
    started = threading.Event()
    failure: list[BaseException] = []
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        try:
            await gateway.start()
        except BaseException as exc:
            failure.append(exc)
            started.set()
            await gateway.stop()
            return
        started.set()
        try:
            await stop.wait()
        finally:
            await gateway.stop()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),),
                              name="latscope-gateway", daemon=True)
    thread.start()
    if not started.wait(START_TIMEOUT_S) or failure:
        raise TargetError(f"gateway did not start: {failure[0] if failure else 'timed out'}")
    try:
        yield gateway.url
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()


@contextlib.contextmanager
def _in_process(config: GatewayConfig) -> Iterator[str]:
    from latscope.server.process import ManagedServer
    from latscope.server.target import free_port

    config = replace(config, port=config.port or free_port(config.host))
    url = f"http://{config.host}:{config.port}"
    log_dir = Path(tempfile.mkdtemp(prefix="latscope-gateway-"))
    server = ManagedServer([sys.executable, "-m", "latscope", "gateway", *cli_args(config)],
                           log_path=log_dir / "gateway.log", health_url=url + "/metrics",
                           ready_timeout=START_TIMEOUT_S, stop_grace=5.0)
    with server:
        yield url


def cli_args(config: GatewayConfig) -> list[str]:
    """The ``latscope gateway`` flags that make ``config``."""
    args = ["--upstream", config.upstream, "--listen", f"{config.host}:{config.port}",
            "--policy", config.policy,
            "--max-inflight", "auto" if config.max_inflight is None else str(config.max_inflight),
            "--initial-inflight", str(config.initial_inflight),
            "--max-queue", str(config.max_queue), "--aging-factor", f"{config.aging_factor:g}",
            "--upstream-priority", config.upstream_priority,
            "--default-max-tokens", str(config.default_max_tokens), "--relay", config.relay]
    if config.ttft_target_ms is not None:
        args += ["--ttft-target", f"{config.ttft_target_ms:g}"]
    if config.aging_rate is not None:
        args += ["--aging-rate", f"{config.aging_rate:g}"]
    if config.tokenizer:
        args += ["--tokenizer", config.tokenizer]
    if config.server_policy != "auto":
        args += ["--server-policy", config.server_policy]
    if config.server_log:
        args += ["--server-log", config.server_log]
    if not config.watch_waiting:
        args.append("--no-watch-waiting")
    return args
