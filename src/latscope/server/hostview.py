"""Where doctor reads the host from: the live machine, or a tree captured by ``doctor --collect``.

Every check reads files (``/proc``, ``/sys``) and tool outputs (``nvidia-smi``, ``rocm-smi``...) only
through a ``HostView``, so the same checks run on the live host and on a captured tree unpacked
anywhere (``--root DIR``). A captured tree mirrors the host's paths under ``DIR`` and keeps each
tool's output in ``DIR/latscope/tools/<name>.txt``; a tool whose file is absent was not installed
on the captured host. Every value read carries the path or command it came from, for evidence.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

TOOLS_DIR = "latscope/tools"  # inside a captured tree
META_DIR = "latscope"
TOOL_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class ToolCommand:
    """A tool invocation doctor knows how to parse; ``key`` names its file in a captured tree."""

    key: str
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.argv)


# Every command doctor may run, in one table so that --collect captures exactly what the checks read.
TOOL_COMMANDS: dict[str, ToolCommand] = {c.key: c for c in (
    ToolCommand("nvidia-smi", ("nvidia-smi",)),
    ToolCommand("nvidia-smi_topo", ("nvidia-smi", "topo", "-m")),
    ToolCommand("nvidia-smi_apps", ("nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                                    "--format=csv,noheader")),
    ToolCommand("rocm-smi_topo", ("rocm-smi", "--showtopo")),
    ToolCommand("rocm-smi_product", ("rocm-smi", "--showproductname")),
    ToolCommand("rocminfo", ("rocminfo",)),
    ToolCommand("amd-smi_static", ("amd-smi", "static", "--asic", "--bus")),
    ToolCommand("amd-smi_process", ("amd-smi", "process")),
)}


@dataclass(frozen=True, slots=True)
class ToolOutput:
    command: str
    text: str
    returncode: int

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.text.strip())


class HostView:
    """Read-only access to one host's /proc, /sys and tool outputs, live or captured."""

    def __init__(self, root: Path | str | None = None, label: str | None = None) -> None:
        self.live = root is None
        self.root = Path("/") if root is None else Path(root)
        self.label = label or str(self.root)  # how evidence names the tree (e.g. the archive)
        if not self.live and not self.root.is_dir():
            from latscope.errors import ConfigError
            raise ConfigError(f"--root {root}: not a directory")

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def source(self, path: str) -> str:
        """How evidence names a file: the host path, prefixed by the tree when captured."""
        return path if self.live else f"{self.label}:{path}"

    def read(self, path: str) -> str | None:
        try:
            return self.path(path).read_text(errors="replace")
        except (OSError, ValueError):
            return None

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self.path(path).read_bytes()
        except OSError:
            return None

    def read_value(self, path: str) -> str | None:
        text = self.read(path)
        return None if text is None else text.strip()

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(path)))
        except OSError:
            return []

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching ``pattern`` (absolute, shell-style), sorted."""
        base = self.root
        return sorted("/" + str(p.relative_to(base)) for p in base.glob(pattern.lstrip("/")))

    def tool(self, key: str) -> ToolOutput | None:
        """The output of one known tool command, or None when the tool is not installed."""
        cmd = TOOL_COMMANDS[key]
        if not self.live:
            text = self.read(f"/{TOOLS_DIR}/{key}.txt")
            return None if text is None else ToolOutput(cmd.text, text, 0)
        if shutil.which(cmd.argv[0]) is None:
            return None
        return run_tool(cmd)

    def has_tool_outputs(self) -> bool:
        return self.live or self.path(f"/{TOOLS_DIR}").is_dir()

    def environ(self, pid: int) -> dict[str, str] | None:
        raw = self.read_bytes(f"/proc/{pid}/environ")
        return None if raw is None else parse_environ(raw)


def run_tool(cmd: ToolCommand) -> ToolOutput:
    try:
        proc = subprocess.run(list(cmd.argv), capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ToolOutput(cmd.text, f"{type(exc).__name__}: {exc}", -1)
    return ToolOutput(cmd.text, proc.stdout + proc.stderr, proc.returncode)


def parse_environ(raw: bytes) -> dict[str, str]:
    """Parse ``/proc/PID/environ`` (NUL-separated ``KEY=value``, see proc(5))."""
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            key, _, value = item.partition(b"=")
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def parse_cpulist(text: str) -> set[int]:
    """Parse a kernel cpulist (``0-3,8,10-11``), as in ``Cpus_allowed_list`` and ``node*/cpulist``."""
    cpus: set[int] = set()
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus


def format_cpulist(cpus: set[int]) -> str:
    out: list[str] = []
    ordered = sorted(cpus)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def url_port(url: str) -> int | None:
    parts = urlsplit(url)
    return parts.port or {"http": 80, "https": 443}.get(parts.scheme)


def find_listening_pid(view: HostView, port: int) -> int | None:
    """The pid owning a TCP socket listening on ``port`` (``/proc/net/tcp{,6}`` state 0A), found
    by matching the socket inode in ``/proc/*/fd``; None when not visible to this user."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (view.read(table) or "").splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    targets = {f"socket:[{i}]" for i in inodes}
    for name in view.listdir("/proc"):
        if not name.isdigit():
            continue
        for fd in view.listdir(f"/proc/{name}/fd"):
            try:
                if os.readlink(view.path(f"/proc/{name}/fd/{fd}")) in targets:
                    return int(name)
            except OSError:
                continue
    return None


def process_tree(view: HostView, pid: int) -> set[int]:
    """``pid`` and its descendants, from /proc/*/stat ppid fields (vLLM's engine core is a
    child); a stat line that does not parse (a process gone mid-read) is skipped."""
    parents: dict[int, int] = {}
    for name in view.listdir("/proc"):
        stat = view.read(f"/proc/{name}/stat") if name.isdigit() else None
        if stat and ")" in stat:
            try:
                parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (IndexError, ValueError):
                continue
    tree, grew = {pid}, True
    while grew:
        new = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= new
        grew = bool(new)
    return tree
