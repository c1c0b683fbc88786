"""``--passive --profile``: ``/start_profile`` over the window's last seconds, ``/stop_profile``
at its end, the new trace file found; the profiler server here is a stand-in that writes the
real vLLM 0.32 CPU profile (the fixture) when stopped, as vLLM does: the point is the bounded
schedule and the two calls, which a CPU vLLM would take a profiler-enabled start (~60 s) to
show."""

from __future__ import annotations

import shutil
import time

import pytest
from aiohttp import web

from latscope.campaign.watching import LiveProfile, hold_window
from latscope.model import RunContext
from latscope.server.scrape import MetricsScraper

# the profile's schedule is timed: one at a time, after the parallel unit phase
pytestmark = [pytest.mark.serial, pytest.mark.slow]


async def test_a_live_profile_covers_the_windows_last_seconds_and_finds_its_file(
        fixtures_dir, tmp_path):
    page = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics.txt").read_text()
    trace = fixtures_dir / "vllm" / "cpu-vllm0.32" / "profile_rank0.pt.trace.json.gz"
    prof = tmp_path / "prof"
    prof.mkdir()
    calls: list[tuple[str, float]] = []

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=page)

    async def start(request: web.Request) -> web.Response:
        calls.append(("start", time.monotonic()))
        return web.Response(text="")

    async def stop(request: web.Request) -> web.Response:
        calls.append(("stop", time.monotonic()))
        shutil.copy(trace, prof / "dp0_pp0_tp0_rank0.1765000000.pt.trace.json.gz")
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/start_profile", start)
    app.router.add_post("/stop_profile", stop)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    done: list[tuple[list[str], int, str]] = []
    try:
        profile = LiveProfile(url, 1.0, str(prof), on_done=lambda *a: done.append(a))
        scraper = MetricsScraper(interval_s=0.5, parse_during_run=True)
        t0 = time.monotonic()
        ended = await hold_window(scraper, [], RunContext(url, tmp_path, {}, 0, time.time()),
                                  3.0, give_up_s=30, profile=profile)
    finally:
        await runner.cleanup()
    assert ended == ""
    assert [c for c, _ in calls] == ["start", "stop"], done
    started, stopped = calls[0][1] - t0, calls[1][1] - t0
    # the window began after the first scrape; the profile is its last second of 3
    assert 1.5 <= started <= 3.5 and 0.9 <= stopped - started <= 1.6
    files, posts, error = done[0]
    assert posts == 2 and not error
    assert [f.endswith("rank0.1765000000.pt.trace.json.gz") for f in files] == [True]
