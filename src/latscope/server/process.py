"""A server process latscope starts, watches and stops: any command, not only vLLM.

The command runs in its own process group, with stdout and stderr going to a log file that is
kept after it stops. ``start`` returns once ``health_url`` answers 200 and raises
``TargetError`` quoting the log's last lines if the process exits first or is not ready in time.
``stop`` signals the whole process group (SIGTERM, then SIGKILL after a grace period) and waits
until no member is left: servers such as vLLM fork engine and worker processes that would
otherwise outlive their parent. Nothing is ever found or killed by name.

Only a detached server (``latscope target up``) gets its own session. One started for a run stays
in latscope's session, on purpose: with the kernel's autogroup scheduling (on by default in most
distributions) each session is one scheduling group, and on a 2-core Linux 6.18 box a busy vLLM
CPU engine in a session of its own kept a process of latscope's session runnable yet off the CPU
for up to 4.9 s at a time (its own /proc schedstat: run-queue wait = the gap; 12 such gaps in
40 s). The client's timing and /metrics scrapes stalled with it; in one session, none in 60 s.

Stopping by PID file after the starting process is gone goes through ``stop_group`` with the
leader's start time (``ProcessIdentity``), so a PID reused by an unrelated process is never hit.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from latscope.errors import TargetError
from latscope.redact import redact_cmd, redact_text

DEFAULT_STOP_GRACE_S = 15.0
# Probes go straight to the server: an http_proxy set in the environment must not intercept them.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A process by PID plus its start time (clock ticks since boot), so PID reuse is detected."""

    pid: int
    pgid: int
    start_ticks: int | None

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity:
        return cls(pid=pid, pgid=os.getpgid(pid), start_ticks=process_start_ticks(pid))


class ManagedServer:
    """One server process: start, wait until healthy, stop by process group. A context manager.

    ``env`` adds to (a value of None removes from) the current environment. With ``detach`` the
    server is meant to outlive this process (``latscope target up``); otherwise, when started from
    the main thread, the kernel sends it SIGTERM if this process dies (``PR_SET_PDEATHSIG``), so a
    crash of latscope does not leave a server behind.
    """

    def __init__(self, cmd: Sequence[str], *, env: Mapping[str, str | None] | None = None,
                 log_path: Path | str, health_url: str, ready_timeout: float = 300.0,
                 stop_grace: float = DEFAULT_STOP_GRACE_S, detach: bool = False,
                 cwd: Path | str | None = None, poll_interval: float = 0.25) -> None:
        if not cmd:
            raise TargetError("empty server command")
        self.cmd = [str(part) for part in cmd]
        self.env = dict(env or {})
        self.log_path = Path(log_path)
        self.health_url = health_url
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.detach = detach
        self.cwd = cwd
        self.poll_interval = poll_interval
        self._proc: subprocess.Popen[bytes] | None = None
        self.identity: ProcessIdentity | None = None
        self.ready_s: float | None = None  # seconds from spawn to the first healthy answer

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def spawn(self) -> ProcessIdentity:
        """Start the process without waiting for readiness (callers can record its identity)."""
        if self._proc is not None:
            raise TargetError(f"server already started (pid {self._proc.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = os.environ.copy()
        for key, value in self.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        pdeathsig = not self.detach and threading.current_thread() is threading.main_thread()
        with open(self.log_path, "wb") as log:
            try:
                self._proc = subprocess.Popen(
                    self.cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=env, cwd=self.cwd, start_new_session=self.detach,
                    process_group=None if self.detach else 0,
                    preexec_fn=_die_with_parent(os.getpid()) if pdeathsig else None,
                )
            except OSError as exc:
                raise TargetError(f"cannot start {redact_cmd(self.cmd)[0]}: {exc}") from exc
        self._t0 = time.monotonic()
        self.identity = ProcessIdentity(self._proc.pid, self._proc.pid,
                                        process_start_ticks(self._proc.pid))
        return self.identity

    def start(self) -> ManagedServer:
        """Spawn and wait until ``health_url`` answers 200; on failure stop it and raise."""
        self.spawn()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self) -> None:
        assert self._proc is not None, "spawn() first"
        deadline = self._t0 + self.ready_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise TargetError(self._failure(
                    f"server exited with code {code} before it was ready"))
            if health_ok(self.health_url):
                self.ready_s = time.monotonic() - self._t0
                return
            if time.monotonic() >= deadline:
                raise TargetError(self._failure(
                    f"server not ready after {self.ready_timeout:g} s ({self.health_url})"))
            time.sleep(self.poll_interval)

    def stop(self) -> int | None:
        """Stop the whole process group; return the leader's exit code (None if never started)."""
        if self._proc is None or self.identity is None:
            return None
        stop_group(self.identity, grace=self.stop_grace, reap=self._proc.poll)
        try:
            return self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # cannot happen after SIGKILL unless in D state
            return None

    def _failure(self, what: str) -> str:
        tail = "\n".join(f"  | {line}" for line in tail_lines(self.log_path))
        return f"{what}; log: {self.log_path}\n  last lines of the log:\n{tail}"

    def __enter__(self) -> ManagedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_group(identity: ProcessIdentity, *, grace: float = DEFAULT_STOP_GRACE_S,
               reap=None) -> bool:
    """SIGTERM the process group, SIGKILL whatever is left after ``grace`` s; True if any was ours.

    ``reap`` (e.g. ``Popen.poll``) is called while waiting so that our own child does not linger
    as a zombie.
    """
    if not owns_group(identity):
        return False
    _signal_group(identity.pgid, signal.SIGTERM)
    if not _wait_group_gone(identity.pgid, grace, reap):
        _signal_group(identity.pgid, signal.SIGKILL)
        _wait_group_gone(identity.pgid, 10.0, reap)
    return True


def owns_group(identity: ProcessIdentity) -> bool:
    """Whether the group recorded in ``identity`` still has live members that are ours.

    The leader counts only if its start time matches. If the leader is gone, the kernel does not
    hand its PID to anyone while the group still has members, so any live member is ours.
    """
    leader_ticks = process_start_ticks(identity.pid)
    if leader_ticks is not None and identity.start_ticks is not None:
        if leader_ticks != identity.start_ticks:
            return False  # the PID was reused: not our process, whatever its group
    return bool(group_members(identity.pgid))


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) PIDs in process group ``pgid``, read from /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():  # not Linux: ask the kernel about the group
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (/proc/PID/stat field 22), or None."""
    fields = _stat_fields(pid)
    if not fields or fields[0] == "Z":
        return None
    return int(fields[19])


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state is [0], pgrp [2], starttime [19])."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()  # the name may contain spaces and parentheses


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _wait_group_gone(pgid: int, timeout: float, reap) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if reap is not None:
            reap()
        if not group_members(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def health_ok(url: str, timeout: float = 2.0) -> bool:
    """True if GET ``url`` answers 200 (urllib: one synchronous probe needs no event loop)."""
    try:
        with _DIRECT.open(url, timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def tail_lines(path: Path, count: int = 15, max_bytes: int = 65536) -> list[str]:
    """The last ``count`` non-empty lines of a text file, secrets redacted; [] if unreadable."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - max_bytes))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return [redact_text(line) for line in lines[-count:]]


def _die_with_parent(parent_pid: int):
    """preexec_fn: ask the kernel to SIGTERM the child when the parent dies (Linux only)."""

    def setup() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return setup
