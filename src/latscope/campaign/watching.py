"""The window of a passive run, held: the scraper and the other observers started, the window's
length waited out (or until the server has been gone for ``give_up_s``), an optional profile
of the window's last seconds, every observer stopped however it ends (Ctrl-C and SIGTERM
included: their files are appended as they come, and ``stop`` writes their summaries).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

from latscope.model import RunContext

_TICK_S = 0.25


async def hold_window(scraper: Any, observers: list[Any], ctx: RunContext, window_s: float,
                      *, give_up_s: float, profile: LiveProfile | None = None,
                      on_tick: Callable[[], None] | None = None) -> str:
    """Run the window; returns "" or why it ended early. ``on_tick`` is called about every
    quarter second (``watch`` redraws from it)."""
    started: list[Any] = []
    try:
        for obs in [scraper, *observers]:
            await obs.start(ctx)
            started.append(obs)
        return await _wait(scraper, ctx, window_s, give_up_s, profile, on_tick)
    finally:
        for obs in reversed(started):
            with contextlib.suppress(Exception):  # one observer's failure loses no other's data
                await asyncio.shield(obs.stop(ctx))


async def _wait(scraper: Any, ctx: RunContext, window_s: float, give_up_s: float,
                profile: LiveProfile | None, on_tick: Callable[[], None] | None) -> str:
    t0 = time.monotonic()
    task = None
    try:
        while (elapsed := time.monotonic() - t0) < window_s:
            if profile is not None and task is None and elapsed >= window_s - profile.seconds:
                task = asyncio.create_task(asyncio.to_thread(profile.take))
            gone = _gone_for(scraper, ctx)
            if gone >= give_up_s:
                return (f"the server answered no scrape for {gone:.0f} s: the window ends at "
                        "its last good scrape")
            if on_tick is not None:
                on_tick()
            await asyncio.sleep(_TICK_S)
        if task is not None:
            await task  # /stop_profile writes the trace before it answers
        return ""
    finally:
        if task is not None and not task.done():
            task.cancel()


def _gone_for(scraper: Any, ctx: RunContext) -> float:
    """Seconds since the last good scrape (since the window began, when there was none)."""
    last = scraper.snapshots[-1].wall_time if scraper.snapshots else ctx.start_wall
    return time.time() - last if scraper.failures else 0.0


class LiveProfile:
    """``/start_profile``, ``seconds`` of the live traffic, ``/stop_profile``, then the new
    trace files in ``trace_dir`` (the server's profiler directory); ``on_done(files, posts,
    error)``."""

    def __init__(self, url: str, seconds: float, trace_dir: str,
                 on_done: Callable[[list[str], int, str], None]) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        self.seconds = seconds
        self.trace_dir = Path(trace_dir)
        self.on_done = on_done
        self.error = ""

    def take(self) -> None:
        from latscope.trace.profiles import TRACE_GLOB, profile_files

        before = set(self.trace_dir.glob(TRACE_GLOB)) if self.trace_dir.is_dir() else set()
        posts = 0
        try:
            _post(self.url, "/start_profile")
            posts += 1
            time.sleep(self.seconds)
            _post(self.url, "/stop_profile")
            posts += 1
        except OSError as exc:
            self.error = f"the profiler endpoints failed: {exc}"
            self.on_done([], posts, self.error)
            return
        deadline = time.monotonic() + 60
        files: list[Any] = []
        while time.monotonic() < deadline and not files:
            new = set(self.trace_dir.glob(TRACE_GLOB)) - before if self.trace_dir.is_dir() \
                else set()
            files = profile_files(sorted(new))
            time.sleep(0.5)
        if not files:
            self.error = f"no new profiler trace appeared in {self.trace_dir} within 60 s"
        self.on_done([str(f.path) for f in files], posts, self.error)


def _post(url: str, path: str) -> None:
    req = urllib.request.Request(url + path, method="POST", data=b"")
    with urllib.request.urlopen(req, timeout=300) as resp:  # noqa: S310 (the user's server)
        resp.read()
