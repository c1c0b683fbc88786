"""Following a server's log as it grows, for a window of live traffic (``tail -F``, in Python).

``LogFollower`` is a ``RunObserver``: ``start`` reads the log's head (the startup lines hold the
configuration: max_num_seqs, the budget, the log level ...) and opens the file at its end;
every ``poll_s`` it appends the new lines to ``RUN/log/window.log``; ``stop`` reads the rest.
A rotated log (a new file under the same name: another inode, or the file shorter than what was
read) is followed into the new file from its start, and the rotation is noted with its time; a
log that disappears is waited for. ``window_log`` then parses the window's lines (their stats,
line rates, request and DEBUG lines) with the head's configuration.

The window's raw lines may hold prompts (``--enable-log-requests``): the passive run keeps only
the parsed log (``log.json``) and deletes ``window.log`` once parsed (``keep_raw`` keeps it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from itertools import islice
from pathlib import Path
from typing import IO, Any

from latscope.server.logs import ServerLog, parse_log

WINDOW_LOG = "log/window.log"
HEAD_LINES = 20_000  # the startup lines are within the first few hundred


class LogFollower:
    """Follow ``path`` from its current end while the window lasts."""

    def __init__(self, path: str | Path, *, poll_s: float = 0.5) -> None:
        self.path = Path(path)
        self.poll_s = poll_s
        self.head: ServerLog | None = None
        self.rotations: list[dict[str, Any]] = []  # {"wall_time", "why"}
        self.errors: list[str] = []
        self.lines = 0
        self._fh: IO[bytes] | None = None
        self._inode: int | None = None
        self._out: Path | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, ctx: Any) -> None:
        self._out = Path(ctx.run_dir) / WINDOW_LOG
        self._out.parent.mkdir(parents=True, exist_ok=True)
        self._out.write_bytes(b"")
        self.head = await asyncio.to_thread(_read_head, self.path)
        self._open(at_end=True)
        self._task = asyncio.create_task(self._loop(), name="latscope-log-follower")

    async def stop(self, ctx: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.poll()
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            await asyncio.to_thread(self.poll)

    def _open(self, *, at_end: bool) -> None:
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 -- held open across polls
        except OSError as exc:
            if not self.errors or "cannot open" not in self.errors[-1]:
                self.errors.append(f"{self.path}: cannot open ({exc.strerror or exc})")
            return
        if at_end:
            fh.seek(0, os.SEEK_END)
        self._fh, self._inode = fh, os.fstat(fh.fileno()).st_ino

    def poll(self) -> None:
        """Copy what was appended since the last poll; follow a rotation."""
        if self._fh is None:
            self._open(at_end=False)  # the log appeared (again): read it from its start
            if self._fh is None:
                return
        self._copy()
        why = self._rotated()
        if why:
            self._copy()  # what the old file got before it was moved away
            self._fh.close()
            self._fh = None
            self.rotations.append({"wall_time": time.time(), "why": why})
            self._open(at_end=False)
            if self._fh is not None:
                self._copy()

    def _rotated(self) -> str:
        assert self._fh is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "the log file was moved away or deleted"
        if st.st_ino != self._inode:
            return "a new file under the log's name (rotated)"
        if st.st_size < self._fh.tell():
            return "the log file was truncated"
        return ""

    def _copy(self) -> None:
        assert self._fh is not None and self._out is not None
        data = self._fh.read()
        if not data:
            return
        # a line still being written stays for the next poll
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            self._fh.seek(cut - len(data), os.SEEK_CUR)
            data = data[:cut]
        self.lines += data.count(b"\n")
        with self._out.open("ab") as out:
            out.write(data)

    def status(self) -> dict[str, Any]:
        return {"path": str(self.path), "lines": self.lines, "rotations": self.rotations,
                "errors": self.errors}


def _read_head(path: Path) -> ServerLog | None:
    try:
        with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
            return parse_log(list(islice(fh, HEAD_LINES)), name=path.name)
    except OSError:
        return None


def window_log(window_file: Path, head: ServerLog | None, name: str) -> ServerLog:
    """The window's lines parsed, with the configuration its head gave where the window's own
    lines do not say (the level and request logging are the window's: what it logged)."""
    window = parse_log(str(window_file), name=name)
    if head is None:
        return window
    config, lines = dict(window.config), dict(window.config_lines)
    for key, value in head.config.items():
        if config.get(key) is None and value is not None and key not in ("log_level",):
            config[key] = value
            if key in head.config_lines:
                lines[key] = head.config_lines[key]
    config["request_logging"] = bool(window.config.get("request_logging")
                                     or head.config.get("enable_log_requests"))
    return ServerLog(window.path, config, lines, window.stats, window.line_rate,
                     head.warnings + window.warnings)
