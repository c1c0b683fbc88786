"""``doctor --collect``: capture the files and tool outputs doctor reads into a ``.tar.gz`` that
``doctor --root`` analyses anywhere; and ``open_root`` to use such an archive (or directory).

The archive mirrors host paths (``proc/...``, ``sys/...``) and adds ``latscope/``: ``tools/<key>.txt``
(one per tool in ``hostview.TOOL_COMMANDS`` that is installed), ``python.json`` (vLLM/torch build),
``environ`` (the collector's own environment), ``server.log`` (when --log is given) and
``collect.json`` (what was captured, when, for which pid). Environment values that look like
secrets and secret-bearing flags are redacted before anything is written.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import msgspec
import orjson

from latscope import __version__
from latscope.env.gpu import local_python_versions
from latscope.env.host import pci_gpus
from latscope.env.serverfacts import is_local
from latscope.errors import ConfigError
from latscope.redact import (
    environ_bytes,
    redact_argv,
    redact_env,
    redact_url_password,
)
from latscope.server.hostview import (
    META_DIR,
    TOOL_COMMANDS,
    TOOLS_DIR,
    HostView,
    find_listening_pid,
    url_port,
)

HOST_FILES = ("/proc/sys/kernel/numa_balancing", "/proc/cmdline", "/proc/cpuinfo")
HOST_GLOBS = ("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor",
              "/sys/devices/system/cpu/cpu0/cpuidle/state*/name",
              "/sys/devices/system/cpu/cpu0/cpuidle/state*/latency",
              "/sys/devices/system/cpu/cpu0/cpuidle/state*/disable",
              "/sys/devices/system/node/node*/cpulist", "/proc/[0-9]*/stat")
PCI_FILES = ("vendor", "device", "class", "numa_node", "local_cpulist", "current_link_speed",
             "max_link_speed", "current_link_width", "max_link_width")


class BundleManifest(msgspec.Struct, kw_only=True):
    """A bundle's ``collect.json``: what it captured, when, and for which server process
    (``doctor --root`` reads the process's pid from it)."""

    pid: int | None = None
    url: str | None = None  # its password redacted
    hostname: str = ""
    time: float | None = None  # UNIX seconds
    latscope: str = ""  # the collecting latscope's version
    tools: list[str] = []  # the tools whose output it holds (TOOL_COMMANDS' keys)


@dataclass(slots=True)
class Collected:
    path: Path
    pid: int | None
    files: int = 0
    tools: list[str] = field(default_factory=list)


class _Writer:
    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar, self.count = tar, 0

    def add(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name.lstrip("/"))
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        self.tar.addfile(info, io.BytesIO(data))
        self.count += 1

    def copy(self, view: HostView, path: str) -> None:
        data = view.read_bytes(path)
        if data is not None:
            self.add(path, data)


def collect(out: Path, url: str | None = None, pid: int | None = None,
            log: str | None = None) -> Collected:
    view = HostView()
    if pid is None and url and is_local(url) and url_port(url):
        pid = find_listening_pid(view, url_port(url) or 0)
    if pid is not None and not view.path(f"/proc/{pid}").is_dir():
        raise ConfigError(f"--pid {pid}: no such process")
    if not out.name.endswith((".tar.gz", ".tgz")):
        raise ConfigError(f"--collect {out}: name it .tar.gz")
    result = Collected(out, pid)
    try:
        tar = tarfile.open(out, "w:gz")  # noqa: SIM115 (opened here to map OSError, closed below)
    except OSError as exc:
        raise ConfigError(f"--collect {out}: {exc.strerror or exc}") from exc
    with tar:
        w = _Writer(tar)
        for path in HOST_FILES:
            w.copy(view, path)
        for pattern in HOST_GLOBS:
            for path in view.glob(pattern):
                w.copy(view, path)
        for gpu in pci_gpus(view):
            for name in PCI_FILES:
                w.copy(view, f"/sys/bus/pci/devices/{gpu.bdf}/{name}")
        if pid is not None:
            _add_process(w, view, pid)
        for key in TOOL_COMMANDS:
            output = view.tool(key)
            if output is not None:
                w.add(f"/{TOOLS_DIR}/{key}.txt", output.text.encode())
                result.tools.append(key)
        w.add(f"/{META_DIR}/python.json", orjson.dumps(local_python_versions()))
        w.add(f"/{META_DIR}/environ", environ_bytes(redact_env(dict(os.environ))))
        if log:
            _add_log(w, Path(log))
        manifest = BundleManifest(pid=pid, url=url and redact_url_password(url),
                                  hostname=socket.gethostname(), time=time.time(),
                                  latscope=__version__, tools=result.tools)
        w.add(f"/{META_DIR}/collect.json", orjson.dumps(msgspec.to_builtins(manifest),
                                                         option=orjson.OPT_INDENT_2))
        result.files = w.count
    return result


def _add_process(w: _Writer, view: HostView, pid: int) -> None:
    env = view.environ(pid)
    if env is not None:
        w.add(f"/proc/{pid}/environ", environ_bytes(redact_env(env)))
    raw = view.read_bytes(f"/proc/{pid}/cmdline") or b""
    argv = redact_argv([a.decode(errors="replace") for a in raw.split(b"\0") if a])
    w.add(f"/proc/{pid}/cmdline", b"".join(a.encode() + b"\0" for a in argv))
    w.copy(view, f"/proc/{pid}/status")


def _add_log(w: _Writer, log: Path) -> None:
    from latscope.redact import redact_text
    try:
        text = log.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"--log {log}: {exc.strerror or exc}") from exc
    w.add(f"/{META_DIR}/server.log", "\n".join(redact_text(x) for x in text.splitlines()).encode())


@contextlib.contextmanager
def open_root(root: str | None) -> Iterator[str | None]:
    """Yield a directory for ``run_doctor(root=...)``: the directory itself, or a ``.tar.gz``
    from ``--collect`` unpacked into a temporary directory (removed afterwards)."""
    if root is None or Path(root).is_dir():
        yield root
        return
    if not Path(root).is_file():
        raise ConfigError(f"--root {root}: no such directory or archive")
    with tempfile.TemporaryDirectory(prefix="latscope-root-") as tmp:
        try:
            with tarfile.open(root, "r:*") as tar:
                tar.extractall(tmp, filter="data")  # no absolute paths, links out, devices
        except (tarfile.TarError, OSError) as exc:
            # tarfile's message for a non-archive spans lines (one per method tried): keep one
            detail = exc.strerror if isinstance(exc, OSError) else "not a tar/tar.gz archive"
            raise ConfigError(f"--root {root}: not a readable tar archive ({detail})") \
                from exc
        yield tmp
