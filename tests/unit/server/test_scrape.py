"""MetricsScraper against a local HTTP server that serves the real fixture pages."""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from latscope.model import RunContext
from latscope.server.metrics import snapshot_value
from latscope.server.scrape import MetricsScraper, read_snapshots


async def _serve(routes: dict[str, tuple[int, str]]) -> tuple[web.AppRunner, str, list[str]]:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("authorization", ""))
        status, body = routes.get(request.path, (404, "not found"))
        return web.Response(status=status, text=body)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}", seen


def _ctx(url: str, tmp_path) -> RunContext:
    return RunContext(base_url=url, run_dir=tmp_path, headers={"authorization": "Bearer s3cret"},
                      start_ns=time.perf_counter_ns(), start_wall=time.time())


async def _until(condition, what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` until it holds: the scraper's own progress, not a guess of how long
    it takes on this machine (a fixed 0.45 s stood here)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what} within {timeout} s"
        await asyncio.sleep(0.01)


async def test_scrapes_at_start_interval_and_stop(fixtures_dir, tmp_path):
    page = (fixtures_dir / "vllm" / "h200-vllm0.26" / "metrics_after_c512.txt").read_text()
    runner, url, seen = await _serve({"/metrics": (200, page)})
    try:
        scraper = MetricsScraper(interval_s=0.1)
        ctx = _ctx(url, tmp_path)
        await scraper.start(ctx)
        raw = tmp_path / "metrics" / "raw.jsonl"
        assert len(raw.read_bytes().splitlines()) == 1  # one scrape before start() returns ...
        assert scraper.snapshots == []  # ... stored raw: parsing waits for the end of the run
        # four scrapes of the loop stored after the first: raw.jsonl is appended once per scrape
        await _until(lambda: raw.read_bytes().count(b"\n") >= 5, "4 scrapes after the first")
        await scraper.stop(ctx)
    finally:
        await runner.cleanup()
    assert not raw.exists()  # parsed into snapshots.jsonl at stop
    snaps = read_snapshots(tmp_path)
    assert len(snaps) >= 6  # start + 4 ticks + stop (one more tick may land before stop)
    assert [s.t_ns for s in snaps] == sorted(s.t_ns for s in snaps)
    # an absolute schedule, never a burst: the loop's i-th scrape comes i intervals after the
    # first at the earliest (late on a busy machine, never early)
    period_ns = int(0.1 * 1e9)
    assert all(s.t_ns - snaps[0].t_ns >= i * period_ns for i, s in enumerate(snaps[1:-1], 1))
    assert all(ctx.start_ns <= s.t_ns for s in snaps)
    assert snapshot_value(snaps[-1], "vllm:request_queue_time_seconds_count") == 2768.0
    assert set(seen) == {"Bearer s3cret"}  # the run's auth header is used ...
    written = "".join(p.read_text() for p in (tmp_path / "metrics").iterdir())
    assert "s3cret" not in written  # ... and never written
    summary = json.loads((tmp_path / "metrics" / "scrape.json").read_text())
    assert summary["status"] == "ok" and summary["scrapes"] == len(snaps)
    assert summary["bytes"]["mean"] == len(page.encode())
    assert summary["scrape_ms"]["mean"] > 0 and summary["parse_ms"]["mean"] > 0
    assert (tmp_path / "metrics" / "last.prom").read_text() == page


async def test_server_without_metrics_endpoint_does_not_break_the_run(tmp_path):
    runner, url, seen = await _serve({})
    try:
        scraper = MetricsScraper(interval_s=0.05)
        ctx = _ctx(url, tmp_path)
        await scraper.start(ctx)
        # the 404 at start ends the loop by itself (a fixed 0.2 s stood here)
        done, _ = await asyncio.wait({scraper._task}, timeout=30)
        assert done, "the scraping loop went on after a 404"
        await scraper.stop(ctx)
    finally:
        await runner.cleanup()
    summary = json.loads((tmp_path / "metrics" / "scrape.json").read_text())
    assert summary["status"] == "no_metrics_endpoint" and summary["scrapes"] == 0
    assert len(seen) == 1  # a 404 stops the scraping
    assert read_snapshots(tmp_path) == []


async def test_stats_disabled_and_unreachable(fixtures_dir, tmp_path):
    page = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics_disable_log_stats.txt").read_text()
    runner, url, _ = await _serve({"/metrics": (200, page)})
    try:
        scraper = MetricsScraper(interval_s=1.0)
        await scraper.start(_ctx(url, tmp_path / "a"))
        await scraper.stop(_ctx(url, tmp_path / "a"))
    finally:
        await runner.cleanup()
    assert scraper.summary().status == "stats_disabled"
    dead = MetricsScraper(interval_s=1.0, timeout_s=0.5)
    ctx = _ctx(url, tmp_path / "b")  # the server is gone now
    await dead.start(ctx)
    await dead.stop(ctx)
    summary = dead.summary()
    assert summary.status == "unreachable" and summary.failures == 2


async def test_live_parsing_and_interrupted_run(fixtures_dir, tmp_path):
    page = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics.txt").read_text()
    runner, url, _ = await _serve({"/metrics": (200, page)})
    try:
        live = MetricsScraper(interval_s=5.0, parse_during_run=True)
        ctx = _ctx(url, tmp_path / "live")
        await live.start(ctx)
        assert len(live.snapshots) == 1  # parsed as it arrived
        await live.stop(ctx)
        assert len(read_snapshots(tmp_path / "live")) == 2
        killed = MetricsScraper(interval_s=5.0)
        await killed.start(_ctx(url, tmp_path / "killed"))  # the run dies: stop() never runs
        killed._task.cancel()
        await killed._session.close()
    finally:
        await runner.cleanup()
    snaps = read_snapshots(tmp_path / "killed")  # recovered from raw.jsonl
    assert len(snaps) == 1 and snapshot_value(snaps[0], "vllm:num_requests_running") is not None


async def test_base_url_scrapes_the_server_behind_a_proxy(fixtures_dir, tmp_path):
    # the load goes to a gateway (its own /metrics has no vllm: series); the server's are wanted
    page = (fixtures_dir / "vllm" / "h200-vllm0.26" / "metrics_after_c512.txt").read_text()
    server, server_url, _ = await _serve({"/metrics": (200, page)})
    proxy, proxy_url, proxy_seen = await _serve({"/metrics": (200, "gateway_only 1\n")})
    try:
        scraper = MetricsScraper(interval_s=0.1, base_url=server_url)
        ctx = _ctx(proxy_url, tmp_path)
        await scraper.start(ctx)
        await scraper.stop(ctx)
    finally:
        await server.cleanup()
        await proxy.cleanup()
    snaps = read_snapshots(tmp_path)
    assert snaps and proxy_seen == []
    assert snapshot_value(snaps[-1], "vllm:request_queue_time_seconds_count") == 2768.0
