"""A passive window's scraper under the faults a live server has: a page of 50 MB (announced,
and streamed without a length), a scrape that times out, the server gone mid-window. A local
HTTP server serves vLLM 0.32's real page and plays each fault; what must hold: the window loses
nothing it scraped, each failure is a line with its time, and a server gone for good ends the
window at its last good scrape."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from latscope.campaign.watching import hold_window
from latscope.model import RunContext
from latscope.server.scrape import MAX_PAGE_BYTES, MetricsScraper, read_snapshots

# timeouts and a window's end are timed: one at a time, after the parallel unit phase
pytestmark = [pytest.mark.serial, pytest.mark.slow]


class FaultyMetrics:
    """/metrics that plays one fault per scrape from a script: "ok", "big", "big-chunked",
    "slow", "down" (the listener closed)."""

    def __init__(self, page: str, script: list[str]) -> None:
        self.page, self.script = page, list(script)
        self.served: list[str] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handler(self, request: web.Request) -> web.StreamResponse:
        mode = self.script.pop(0) if self.script else "ok"
        self.served.append(mode)
        if mode == "slow":
            await asyncio.sleep(8.0)
        if mode == "big":  # a real page padded past 50 MB, Content-Length announced
            return web.Response(text=self.page + "# pad\n" * (50 * (1 << 20) // 6))
        if mode == "big-chunked":  # the same streamed: no length, the cap must cut the read
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            chunk = ("# pad\n" * 100_000).encode()
            for _ in range(50 * (1 << 20) // len(chunk) + 1):
                try:
                    await resp.write(chunk)
                except (ConnectionError, RuntimeError):
                    break
            return resp
        return web.Response(text=self.page)

    async def start(self) -> FaultyMetrics:
        app = web.Application()
        app.router.add_get("/metrics", self.handler)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def _ctx(url: str, tmp_path) -> RunContext:
    return RunContext(url, tmp_path, {}, time.perf_counter_ns(), time.time())


async def test_a_50_mb_page_and_a_timeout_are_lines_and_lose_no_other_scrape(fixtures_dir,
                                                                           tmp_path):
    page = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics.txt").read_text()
    server = await FaultyMetrics(page, ["ok", "big", "ok", "big-chunked", "ok", "slow",
                                        "ok"]).start()
    try:
        # 3 s: reading 16 MB of a streamed page must not itself time out on a busy 2-core box
        scraper = MetricsScraper(interval_s=0.3, parse_during_run=True, timeout_s=3.0)
        ctx = _ctx(server.url, tmp_path)
        ended = await hold_window(scraper, [], ctx, 10.0, give_up_s=30.0)
    finally:
        await server.stop()
    assert ended == ""
    errors = [f.error for f in scraper.failure_log]
    assert sum("over 16 MB" in e and "announced" in e for e in errors) == 1, errors
    assert sum("over 16 MB" in e and "streamed" in e for e in errors) == 1, errors
    assert sum("TimeoutError" in e for e in errors) == 1, errors
    assert all(isinstance(f.wall_time, float) for f in scraper.failure_log)
    ok = server.served.count("ok")
    assert len(scraper.snapshots) == ok >= 4  # every page that came whole was kept
    assert len(read_snapshots(tmp_path)) == ok  # and is on disk
    assert MAX_PAGE_BYTES == 16 << 20


async def test_a_server_gone_mid_window_ends_it_at_its_last_good_scrape(fixtures_dir, tmp_path):
    page = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics.txt").read_text()
    server = await FaultyMetrics(page, []).start()
    scraper = MetricsScraper(interval_s=0.2, parse_during_run=True, timeout_s=0.5)
    ctx = _ctx(server.url, tmp_path)

    async def kill_after_three() -> None:
        while len(scraper.snapshots) < 3:
            await asyncio.sleep(0.05)
        await server.stop()

    killer = asyncio.create_task(kill_after_three())
    t0 = time.monotonic()
    ended = await hold_window(scraper, [], ctx, 60.0, give_up_s=2.0)
    await killer
    assert "answered no scrape for" in ended and time.monotonic() - t0 < 30
    kept = read_snapshots(tmp_path)
    assert len(kept) == len(scraper.snapshots) >= 3
    assert scraper.failures >= 1
    assert (tmp_path / "metrics" / "scrape.json").is_file()  # stop() wrote the summary


async def test_an_older_vllms_series_names_are_read_and_said(fixtures_dir, tmp_path):
    from latscope.campaign.passive_dir import scrape_notes

    page = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics.txt").read_text()
    old = (page.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
           .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"))
    server = await FaultyMetrics(old, []).start()
    try:
        scraper = MetricsScraper(interval_s=0.2, parse_during_run=True)
        await hold_window(scraper, [], _ctx(server.url, tmp_path), 0.7, give_up_s=30.0)
    finally:
        await server.stop()
    names = {s.name for s in scraper.snapshots[-1].samples}
    assert "vllm:kv_cache_usage_perc" in names and "vllm:gpu_cache_usage_perc" not in names
    notes = scrape_notes(scraper.summary())
    said = next(n for n in notes if n.startswith("older vLLM series"))
    assert "vllm:gpu_cache_usage_perc -> vllm:kv_cache_usage_perc" in said
    assert "vllm:time_per_output_token_seconds -> vllm:inter_token_latency_seconds" in said
