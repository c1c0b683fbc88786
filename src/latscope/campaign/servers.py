"""The servers a campaign controls: the embedded local vLLM, or a user's ``--serve-cmd``.

A ``Change`` is what a fix alters in the server's launch (flags added or removed, environment
variables set or unset); ``ServerControl.start(change)`` starts one server with it. Servers run in
their own process group, listen where the command says (the local target: 127.0.0.1), and are
stopped by their group, never by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Mapping, Sequence

from latscope.errors import ConfigError


@dataclass(frozen=True)
class Change:
    """A change to a server's launch. ``flags`` replace any earlier value of the same flag."""

    flags: tuple[str, ...] = ()  # e.g. ("--max-num-seqs", "16")
    remove: tuple[str, ...] = ()  # flags to drop (with their value), e.g. ("--enable-log-requests",)
    set_env: tuple[tuple[str, str], ...] = ()
    unset_env: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [" ".join(self.flags)] if self.flags else []
        parts += [f"without {flag}" for flag in self.remove]
        parts += [f"{k}={v}" for k, v in self.set_env]
        parts += [f"{k} unset" for k in self.unset_env]
        return ", ".join(p for p in parts if p) or "no change"

    def apply_args(self, argv: Sequence[str]) -> list[str]:
        out = _drop_flags(list(argv), {*self.remove, *self.flags[::2]})
        return out + list(self.flags)

    def apply_env(self, env: Mapping[str, str | None]) -> dict[str, str | None]:
        """``env`` with the change; an unset variable maps to None, which ``ManagedServer``
        removes from the inherited environment too."""
        out = {k: v for k, v in env.items() if k not in self.unset_env}
        out.update({k: None for k in self.unset_env})
        out.update(dict(self.set_env))
        return out


# vLLM flags that take no value: `vllm serve --enforce-eager MODEL` keeps MODEL when the flag goes
SWITCHES = frozenset({"--enforce-eager", "--enable-log-requests", "--disable-log-stats",
                      "--enable-prefix-caching", "--no-enable-prefix-caching",
                      "--enable-chunked-prefill", "--no-enable-chunked-prefill"})


def _drop_flags(argv: list[str], flags: set[str]) -> list[str]:
    """``argv`` without ``flags``, each with its value (``--f v`` or ``--f=v``)."""
    out, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in flags:
            has_value = ("=" not in arg and name not in SWITCHES and i + 1 < len(argv)
                         and not argv[i + 1].startswith("--"))
            skip = has_value
            continue
        out.append(arg)
    return out


@dataclass
class Running:
    """A started server: where it answers and what diagnose may read of it."""

    url: str
    model: str | None
    pid: int | None
    log_path: Path | None
    tokenizer_dir: str | None
    start_s: float
    argv: list[str] = field(default_factory=list)
    env: dict[str, str | None] = field(default_factory=dict)
    profiler_dir: Path | None = None
    # latscope's OTLP receiver the server sends its per-request spans to (local target), if any
    collector: Any = None
    # the diagnosed server's ``HeldServer.set_aside``: stops it for an A/B whose arms restart
    set_aside: Callable[[], ContextManager[None]] | None = None


class ServerControl:
    """Starts the server under diagnosis, with or without a ``Change``."""

    kind = "none"
    # Whether two servers of this kind may run at once (the A/B then alternates load between
    # two running servers instead of restarting one): true for the small CPU target only.
    concurrent_arms = False

    @property
    def argv(self) -> list[str]:
        return []

    @property
    def env(self) -> dict[str, str]:
        return {}

    @contextlib.contextmanager
    def start(self, change: Change | None, log_dir: Path) -> Iterator[Running]:
        raise NotImplementedError
        yield  # pragma: no cover


class LocalControl(ServerControl):
    """The embedded local vLLM (tiny model, CPU build) with extra flags and environment."""

    kind = "local"
    concurrent_arms = True  # an idle vLLM CPU server takes no CPU (measured: 0 s over 10 s)

    def __init__(self, serve_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 profiler_dir: Path | None = None) -> None:
        self.serve_args, self.extra_env = list(serve_args), dict(env or {})
        self.profiler_dir = profiler_dir

    @property
    def argv(self) -> list[str]:
        return list(self.serve_args)

    @property
    def env(self) -> dict[str, str]:
        return dict(self.extra_env)

    @contextlib.contextmanager
    def start(self, change: Change | None, log_dir: Path) -> Iterator[Running]:
        from latscope.server.otlp import SpanCollector
        from latscope.server.target import LocalTarget

        args = change.apply_args(self.serve_args) if change else self.serve_args
        env = change.apply_env(self.extra_env) if change else self.extra_env
        t0 = time.monotonic()
        # tracing on: each measured request is joined to vLLM's span of it (docs/observe.md)
        with SpanCollector() as collector:
            target = LocalTarget(serve_args=args, env=env, log_dir=log_dir,
                                 profiler_dir=self.profiler_dir if change is None else None,
                                 otlp_endpoint=collector.http_endpoint)
            with target:
                yield Running(target.url, target.model_name, target.pid, target.log_path,
                              str(target.tokenizer_dir) if target.tokenizer_dir else None,
                              time.monotonic() - t0, list(args), dict(env),
                              self.profiler_dir if change is None else None, collector)


class CommandControl(ServerControl):
    """A user's ``--serve-cmd`` with a ``{port}`` placeholder, on 127.0.0.1 unless it says else."""

    kind = "serve-cmd"

    def __init__(self, template: str, *, host: str = "127.0.0.1",
                 ready_timeout_s: float = 900.0) -> None:
        if "{port}" not in template:
            raise ConfigError("--serve-cmd needs a {port} placeholder, e.g. "
                              "'vllm serve MODEL --port {port}'")
        try:
            self.base_argv = shlex.split(template.replace("{port}", "0"))
        except ValueError as exc:
            raise ConfigError(f"--serve-cmd is not a valid command line: {exc}") from None
        self.template, self.host, self.ready_timeout_s = template, host, ready_timeout_s

    @property
    def argv(self) -> list[str]:
        return list(self.base_argv)

    @contextlib.contextmanager
    def start(self, change: Change | None, log_dir: Path) -> Iterator[Running]:
        from latscope.server.process import ManagedServer
        from latscope.server.target import free_port

        port = free_port(self.host)
        argv = shlex.split(self.template.replace("{port}", str(port)))
        argv = change.apply_args(argv) if change else argv
        env = change.apply_env({}) if change else {}
        url = f"http://{self.host}:{port}"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"server-{port}.log"
        t0 = time.monotonic()
        server = ManagedServer(argv, env=env, log_path=log_path, health_url=f"{url}/health",
                               ready_timeout=self.ready_timeout_s)
        with server:
            yield Running(url, None, server.pid, log_path, None, time.monotonic() - t0,
                          argv, {})


class HeldServer:
    """The server under diagnosis, held open for every stage, which an A/B whose arms each
    start their own server sets aside first: a GPU server takes most of the device's memory
    (vLLM's --gpu-memory-utilization 0.92), so a second one cannot start beside it. Measured on
    the H200: the first arm of an eager A/B died with "Free memory on device (9.16/139.8 GiB) on
    startup is less than desired" while the diagnosed server still ran."""

    def __init__(self, control: ServerControl, log_dir: Path) -> None:
        self.control, self.log_dir = control, log_dir
        self._stack = contextlib.ExitStack()
        self.running: Running | None = None
        self.restarts = 0

    def __enter__(self) -> Running:
        self.running = self._start(self.log_dir)
        return self.running

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self, log_dir: Path) -> Running:
        running = self._stack.enter_context(self.control.start(None, log_dir))
        running.set_aside = self.set_aside
        return running

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """Stopped for the block (by its process group) and started again after with the same
        launch, so that the stages after an A/B measure the server as diagnosed. The same
        ``Running`` is updated in place: those stages read its url, pid and log."""
        if self.control.concurrent_arms or self.running is None:
            yield
            return
        self._stack.close()
        try:
            yield
        finally:
            self._stack = contextlib.ExitStack()
            self.restarts += 1
            fresh = self._start(self.log_dir.with_name(f"{self.log_dir.name}-{self.restarts}"))
            for f in dataclasses.fields(fresh):
                setattr(self.running, f.name, getattr(fresh, f.name))
