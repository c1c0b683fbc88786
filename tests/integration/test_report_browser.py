"""report.html opened in a real headless Chromium, watched over the DevTools protocol (CDP):
the page loads, its plots are drawn, the findings are listed, the screenshot is not blank, and
nothing is logged as an error and nothing is fetched (only the page's own file:// URL).

Needs Debian's `chromium` (`bash scripts/install.sh test` installs it). Set
LATSCOPE_KEEP_SCREENSHOT=PATH to keep the screenshot for a look.
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from latscope.report.write import write_reports
from report_samples import HOSTILE, full_report, hostile_report

# untimed: what its processes did, never a timing or a verdict (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.untimed]

# As root in a container: no sandbox, no GPU; and nothing that phones home on start, so any
# request seen is the page's own.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-default-apps", "--mute-audio",
                  "--remote-debugging-port=0", "--window-size=1100,900"]


def _chromium() -> str:
    for name in (os.environ.get("LATSCOPE_CHROMIUM", ""), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.fail("chromium not found: run `bash scripts/install.sh test` (or set LATSCOPE_CHROMIUM)")


class Browser:
    """One headless Chromium of our own (stopped by its process group), one page, CDP events."""

    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.proc = subprocess.Popen([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}

    async def connect(self, session: aiohttp.ClientSession) -> None:
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromium did not start (exit {self.proc.poll()})")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        page = next(t for t in targets if t["type"] == "page")
        self.ws = await session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = msg.json()
            if "id" in data and data["id"] in self._waiting:
                self._waiting.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._waiting[msg_id] = fut
        await self.ws.send_json({"id": msg_id, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, 60)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply["result"]

    async def wait_for(self, method: str, timeout: float = 60, **params: Any) -> None:
        """Until an event ``method`` came whose params include ``params``."""
        deadline = time.monotonic() + timeout
        while not any(e["method"] == method and params.items() <= e["params"].items()
                      for e in self.events):
            assert time.monotonic() < deadline, f"no {method} within {timeout} s"
            await asyncio.sleep(0.05)

    async def evaluate(self, expression: str) -> Any:
        reply = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return reply["result"].get("value")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # our own process group, by its id
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


async def open_page(path: Path, profile: Path) -> dict[str, Any]:
    """Load ``path`` and return what the page did: requests, errors, DOM counts, screenshot."""
    browser = Browser(profile)
    try:
        async with aiohttp.ClientSession() as session:
            await browser.connect(session)
            for domain in ("Network", "Runtime", "Log", "Page"):
                await browser.send(f"{domain}.enable")
            await browser.send("Page.setLifecycleEventsEnabled", enabled=True)
            navigation = await browser.send("Page.navigate", url=path.as_uri())
            await browser.wait_for("Page.loadEventFired")
            # late requests, and the errors they bring, are in once the page's network has been
            # quiet for 500 ms: Chromium's own "networkIdle" (a fixed 0.5 s sleep stood here)
            await browser.wait_for("Page.lifecycleEvent", name="networkIdle",
                                   loaderId=navigation["loaderId"])
            dom = await browser.evaluate("""({
                svgs: document.querySelectorAll('svg').length,
                drawn: [...document.querySelectorAll('svg')].filter(
                    s => s.getBBox().width > 100 && s.querySelectorAll('path').length > 5).length,
                findings: [...document.querySelectorAll('li.finding .title')].map(
                    e => e.textContent),
                verdict: document.querySelector('.verdict-text').textContent,
                scripts: document.scripts.length,
                height: document.documentElement.scrollHeight})""")
            metrics = await browser.send("Page.getLayoutMetrics")
            size = metrics["cssContentSize"]
            shot = await browser.send("Page.captureScreenshot", format="png",
                                      captureBeyondViewport=True,
                                      clip={"x": 0, "y": 0, "width": size["width"],
                                            "height": min(size["height"], 8000), "scale": 1})
            await browser.ws.close()
    finally:
        browser.stop()
    events = browser.events
    return {
        "requests": [e["params"]["request"]["url"] for e in events
                     if e["method"] == "Network.requestWillBeSent"],
        "errors": [e["params"] for e in events
                   if (e["method"] == "Runtime.consoleAPICalled"
                       and e["params"]["type"] in ("error", "assert", "warning"))
                   or e["method"] == "Runtime.exceptionThrown"
                   or (e["method"] == "Log.entryAdded"
                       and e["params"]["entry"]["level"] in ("error", "warning"))
                   or e["method"] == "Network.loadingFailed"],
        "dom": dom,
        "png": base64.b64decode(shot["data"]),
    }


def _colours(png: bytes) -> int:
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.thumbnail((400, 1600))  # enough to tell a drawn page from a blank one, quickly
    return len(image.getcolors(maxcolors=1 << 20) or [])


def _foreign(requests: list[str], page: Path) -> list[str]:
    return [u for u in requests if u != page.as_uri() and not u.startswith("data:")]


async def test_report_opens_offline_with_plots_and_findings(tmp_path):
    paths = write_reports(tmp_path / "run", full_report())
    seen = await open_page(paths["html"], tmp_path / "profile")
    keep = os.environ.get("LATSCOPE_KEEP_SCREENSHOT")
    if keep:
        Path(keep).write_bytes(seen["png"])

    assert _foreign(seen["requests"], paths["html"]) == []
    assert seen["errors"] == []
    dom = seen["dom"]
    assert dom["scripts"] == 0
    assert dom["svgs"] == 5 and dom["drawn"] == 5, dom  # every chart laid out, with marks
    # the ranked list every renderer shows first: what to act on (findings.rank.display_group)
    assert dom["findings"] == [f["title"] for f in full_report()["findings"][:2]]
    assert dom["verdict"].startswith("At the knee (c=16), 81% of mean TTFT is queueing")
    assert seen["png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert _colours(seen["png"]) > 1000  # charts and badges (~5000 measured), not a blank page


async def test_hostile_text_stays_text_in_the_browser(tmp_path):
    paths = write_reports(tmp_path / "run", hostile_report())
    seen = await open_page(paths["html"], tmp_path / "profile")
    assert _foreign(seen["requests"], paths["html"]) == [] and seen["errors"] == []
    assert seen["dom"]["scripts"] == 0
    assert seen["dom"]["findings"][0] == HOSTILE  # shown literally, not run or parsed


_CSP = ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">")


@pytest.mark.parametrize("head, body, error", [
    ("", "<script>console.error('boom')</script>", "boom"),
    (_CSP, "", "violates the following Content Security Policy"),  # blocked, still caught
])
async def test_harness_catches_requests_and_errors(tmp_path, head, body, error):
    """The checks above can fail: a page that tries to fetch, or logs an error, is caught."""
    page = tmp_path / "bad.html"
    page.write_text(f"<!DOCTYPE html><html><head>{head}</head><body><p>x</p>"
                    f'<img src="http://127.0.0.1:9/pixel.png">{body}</body></html>')
    seen = await open_page(page, tmp_path / "profile")
    assert _foreign(seen["requests"], page) == ["http://127.0.0.1:9/pixel.png"]
    assert error in repr(seen["errors"])
    assert _colours(seen["png"]) < 200  # a near-blank page (~60 measured) is told apart


async def test_comparison_report_opens_offline_with_both_runs_overlaid(tmp_path):
    """`latscope compare`'s report.html: its charts drawn, its verdict and findings shown,
    nothing fetched and nothing logged."""
    from compare_samples import write_run

    from latscope.campaign.compare import CompareOptions, compare_runs
    from latscope.campaign.compare_write import write_comparison
    from latscope.rundir import RunDir

    base = write_run(tmp_path / "a", seed=1)
    new = write_run(tmp_path / "b", seed=2, ttft_ms=80, queue_share=0.5, running=2, waiting=6)
    comparison = compare_runs([base], [new], CompareOptions(draws=500))
    write_comparison(RunDir.create("compare", tmp_path / "cmp"), comparison)
    page = tmp_path / "cmp" / "report.html"
    seen = await open_page(page, tmp_path / "profile")
    assert _foreign(seen["requests"], page) == [] and seen["errors"] == []
    dom = seen["dom"]
    assert dom["scripts"] == 0
    assert dom["svgs"] == 2 and dom["drawn"] == 2, dom  # the changes and the distributions
    assert dom["verdict"].startswith("TTFT mean +")
    assert dom["findings"][0].startswith("regression: TTFT mean")
    assert _colours(seen["png"]) > 1000
