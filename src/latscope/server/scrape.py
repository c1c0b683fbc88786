"""``MetricsScraper``: reads the server's ``/metrics`` in step with a load run and stores every scrape.

It is a ``RunObserver``: ``start`` scrapes once right away, then every ``interval_s`` on an absolute
schedule (so scrapes do not drift), and ``stop`` scrapes once more, so the first and last snapshots
bound the run. Snapshot ``t_ns`` is ``time.perf_counter_ns()`` when the response headers arrived --
the page is rendered before its headers are sent -- on the same clock as the ``RequestRecord``s.

Parsing stays off the hot path. Fetching is asynchronous (aiohttp, one connection); during the run
each raw page is only appended to ``metrics/raw.jsonl`` (from a worker thread), and the pages are
parsed into ``metrics/snapshots.jsonl`` when the run stops. Parsing a 50 kB vLLM page takes
30-120 ms of pure Python: even in a worker thread it holds the GIL and delays the load generator's
timestamps (``benchmarks/bench_observe.py`` measures it), so it waits until no request is in flight.
``parse_during_run=True`` parses each page as it arrives instead (in a thread), for consumers that
need live snapshots. An interrupted run keeps ``raw.jsonl``; ``read_snapshots`` parses it then.

Other files: ``first.prom`` / ``last.prom`` (the raw pages bounding the run, to check our numbers
with other tools) and ``scrape.json`` (status and the scraper's own overhead). A server without
``/metrics``, or with stats disabled, never breaks the run: ``scrape.json`` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import msgspec
import numpy as np
import orjson
from msgspec import UNSET, UnsetType

from latscope.errors import ScrapeError
from latscope.model import MetricSnapshot, RunContext
from latscope.rundir import iter_jsonl
from latscope.server.metrics import has_vllm_series, parse_metrics_text

SNAPSHOTS = "snapshots.jsonl"
RAW = "raw.jsonl"
_MAX_ERRORS_KEPT = 5
_MAX_FAILURES_TIMED = 1000  # scrape.json's failure_log: when each failed, for a window's gaps
# A vLLM page is ~50 kB (~1 MB with many LoRA adapters or engines); a page far larger is not
# one to parse every few seconds (prometheus_client's parser: ~1 s a MB): it is refused
MAX_PAGE_BYTES = 16 << 20


class ScrapeFailure(msgspec.Struct):
    wall_time: float
    error: str


class ScrapeSummary(msgspec.Struct, kw_only=True):
    """``metrics/scrape.json``: the scraper's status and its own cost (what it cost the server
    and the client). The figures are ``{mean, p50, max}`` (None: no scrape was parsed); the
    span and busy share only from two scrapes on. ``read_scrape_summary`` reads it back."""

    status: str  # ok | stats_disabled | unreachable | unparsable | no_metrics_endpoint
    path: str = "/metrics"
    interval_s: int | float | None = None
    scrapes: int = 0
    failures: int = 0
    errors: list[str] = []  # the first few failures' messages
    vllm_series: bool = False
    parsed: str = ""  # during the run | after the run
    failure_log: list[ScrapeFailure] = []  # when each failed (a window's gaps)
    renamed: dict[str, str] = {}  # old vLLM names seen -> the names read
    scrape_ms: dict[str, float] | None = None
    parse_ms: dict[str, float] | None = None
    bytes: dict[str, float] | None = None
    span_s: float | UnsetType = UNSET
    busy_fraction: float | None | UnsetType = UNSET


def read_scrape_summary(run_dir: Path) -> ScrapeSummary | None:
    """A run directory's ``metrics/scrape.json``; None where it has none (or one that does not
    fit: its notes then say no scrape was recorded)."""
    path = Path(run_dir) / "metrics" / "scrape.json"
    try:
        return msgspec.json.decode(path.read_bytes(), type=ScrapeSummary, strict=False)
    except (OSError, msgspec.DecodeError):
        return None


@dataclass(frozen=True, slots=True)
class RawPage:
    """One scrape as it came, before its page is parsed (a line of ``raw.jsonl``, its text
    beside these)."""

    t_ns: int  # perf_counter_ns when the response headers arrived
    wall_time: float
    scrape_ms: float = 0.0
    bytes: int = 0


class MetricsScraper:
    """Scrape ``ctx.base_url + path`` at start, every ``interval_s``, and at stop; ``base_url``
    scrapes another server instead (the one behind a gateway the load is sent to)."""

    def __init__(self, interval_s: float = 2.0, *, path: str = "/metrics",
                 timeout_s: float | None = None, parse_during_run: bool = False,
                 keep_raw: bool = False, base_url: str | None = None,
                 max_bytes: int = MAX_PAGE_BYTES, keep_last: int | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.interval_s = interval_s
        self.path = path
        self.base_url = base_url
        self.parse_during_run = parse_during_run
        self.keep_raw = keep_raw
        self.max_bytes = max_bytes
        # snapshots held in memory (all on disk): a watch of days keeps its last minutes only
        self.keep_last = keep_last
        self._scrapes = 0
        self._first_t_ns = 0
        self.timeout_s = timeout_s if timeout_s is not None else max(1.0, min(10.0, interval_s * 2))
        self.snapshots: list[MetricSnapshot] = []
        self._stats: list[dict[str, float]] = []  # per scrape: scrape_ms, parse_ms, bytes
        self._errors: list[str] = []
        self.failure_log: list[ScrapeFailure] = []
        self.renamed: dict[str, str] = {}  # old vLLM names seen -> the names read
        self._failures = 0
        self._missing_endpoint = False
        self._has_vllm: bool | None = None
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._dir: Path | None = None
        self._last_raw = ""
        self._ingest_lock = threading.Lock()
        self._raw_count = 0

    @property
    def scrapes(self) -> int:
        """Pages read and kept so far (on disk; ``snapshots`` may hold the last ones only)."""
        return self._scrapes

    @property
    def failures(self) -> int:
        """Scrapes that failed so far (a timeout, an HTTP error, a refused page)."""
        return self._failures

    # -- RunObserver ---------------------------------------------------------------------------
    async def start(self, ctx: RunContext) -> None:
        self._dir = ctx.run_dir / "metrics"
        self._dir.mkdir(parents=True, exist_ok=True)
        (self._dir / SNAPSHOTS).write_bytes(b"")
        (self._dir / RAW).write_bytes(b"")
        self._session = aiohttp.ClientSession(
            headers=dict(ctx.headers),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            connector=aiohttp.TCPConnector(limit=1))
        await self._scrape(ctx, first=True)
        self._task = asyncio.create_task(self._loop(ctx), name="latscope-metrics-scraper")

    async def stop(self, ctx: RunContext) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            await self._scrape(ctx)
        finally:
            if self._session is not None:
                await self._session.close()
            if not self.parse_during_run:
                await asyncio.to_thread(self._parse_raw)
            self._write_summary()

    # -- scraping ------------------------------------------------------------------------------
    async def _loop(self, ctx: RunContext) -> None:
        period_ns = int(self.interval_s * 1e9)
        next_ns = time.perf_counter_ns() + period_ns
        while not self._missing_endpoint:
            await asyncio.sleep(max(0.0, (next_ns - time.perf_counter_ns()) / 1e9))
            await self._scrape(ctx)
            next_ns += period_ns
            now = time.perf_counter_ns()
            if next_ns < now:  # a slow scrape: skip the missed ticks instead of bursting
                next_ns = now + period_ns - (now - next_ns) % period_ns

    async def _scrape(self, ctx: RunContext, *, first: bool = False) -> None:
        if self._session is None or self._missing_endpoint:
            return
        url = (self.base_url or ctx.base_url).rstrip("/") + self.path
        sent_ns = time.perf_counter_ns()
        try:
            async with self._session.get(url) as resp:
                t_ns = time.perf_counter_ns()
                wall = time.time()
                body = await _read_capped(resp, self.max_bytes)
                done_ns = time.perf_counter_ns()
                if body is None:
                    self._note_error(f"{url}: a page over {self.max_bytes >> 20} MB "
                                     f"({_size_words(resp.content_length)}): not read")
                    return
                if resp.status == 404:
                    self._missing_endpoint = True
                    self._note_error(f"{url}: HTTP 404 (the server has no /metrics endpoint)")
                    return
                if resp.status != 200:
                    self._note_error(f"{url}: HTTP {resp.status}")
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self._note_error(f"{url}: {type(exc).__name__}: {exc}")
            return
        scrape_ms = (done_ns - sent_ns) / 1e6
        text = body.decode("utf-8", errors="replace")
        raw = RawPage(t_ns, wall, scrape_ms, len(body))
        if not self.parse_during_run:
            self._raw_count += 1
            await asyncio.to_thread(self._append_raw, raw, text, first or self._raw_count == 1)
            return
        try:
            await asyncio.to_thread(self._ingest, text, raw, first or not self.snapshots)
        except ScrapeError as exc:
            self._note_error(f"{url}: {exc}")

    def _append_raw(self, raw: RawPage, text: str, first: bool) -> None:
        """Worker thread, during the run: keep the page as it came (no parsing)."""
        assert self._dir is not None
        with self._ingest_lock, (self._dir / RAW).open("ab") as fh:
            fh.write(orjson.dumps({**asdict(raw), "text": text}) + b"\n")
        if first:
            (self._dir / "first.prom").write_text(text)
        self._last_raw = text

    def _parse_raw(self) -> None:
        """Worker thread, after the run: parse every stored page into snapshots.jsonl."""
        assert self._dir is not None
        raw_path = self._dir / RAW
        for line in iter_jsonl(raw_path):
            text = line.pop("text")
            try:
                self._ingest(text, msgspec.convert(line, RawPage, strict=False), False)
            except ScrapeError as exc:
                self._note_error(f"page at t_ns={line.get('t_ns')}: {exc}")
        if not self.keep_raw:
            raw_path.unlink(missing_ok=True)

    def _note_error(self, message: str) -> None:
        self._failures += 1
        if len(self.failure_log) < _MAX_FAILURES_TIMED:
            self.failure_log.append(ScrapeFailure(time.time(), message))
        if len(self._errors) < _MAX_ERRORS_KEPT:
            self._errors.append(message)

    def _ingest(self, text: str, raw: RawPage, first: bool) -> None:
        """Parse one page, append it to snapshots.jsonl (and keep it as first/last raw page)."""
        with self._ingest_lock:  # a scrape cancelled at stop() may still be in its thread
            parse_start = time.perf_counter_ns()
            snap = _snapshot(text, raw, self.renamed)
            parse_ms = (time.perf_counter_ns() - parse_start) / 1e6
            self._has_vllm = bool(self._has_vllm) or has_vllm_series(snap)
            assert self._dir is not None
            with (self._dir / SNAPSHOTS).open("ab") as fh:
                fh.write(orjson.dumps({**snap.to_dict(), "bytes": raw.bytes,
                                       "parse_ms": parse_ms}) + b"\n")
            if first:
                (self._dir / "first.prom").write_text(text)
            self._last_raw = text
            self.snapshots.append(snap)
            self._scrapes += 1
            self._first_t_ns = self._first_t_ns or snap.t_ns
            if self.keep_last is not None and len(self.snapshots) > 2 * self.keep_last:
                del self.snapshots[:-self.keep_last]
            self._stats.append({"scrape_ms": raw.scrape_ms, "parse_ms": parse_ms,
                                "bytes": raw.bytes})

    def _write_summary(self) -> None:
        if self._dir is None:
            return
        if self._last_raw:
            (self._dir / "last.prom").write_text(self._last_raw)
        (self._dir / "scrape.json").write_text(
            json.dumps(msgspec.to_builtins(self.summary()), indent=2))

    def summary(self) -> ScrapeSummary:
        """Status and the scraper's own overhead (what it cost the server and the client)."""
        if self._missing_endpoint:
            status = "no_metrics_endpoint"
        elif not self._scrapes:
            status = "unreachable" if not self._raw_count else "unparsable"
        elif not self._has_vllm:
            status = "stats_disabled"  # a page, but no vllm:* series (--disable-log-stats)
        else:
            status = "ok"
        out = ScrapeSummary(status=status, path=self.path, interval_s=self.interval_s,
                            scrapes=self._scrapes, failures=self._failures, errors=self._errors,
                            vllm_series=bool(self._has_vllm),
                            parsed="during the run" if self.parse_during_run else "after the run",
                            failure_log=self.failure_log, renamed=self.renamed,
                            scrape_ms=self._cost("scrape_ms"), parse_ms=self._cost("parse_ms"),
                            bytes=self._cost("bytes"))
        if self._scrapes >= 2:
            span_s = (self.snapshots[-1].t_ns - self._first_t_ns) / 1e9
            busy_s = sum(s["scrape_ms"] + s["parse_ms"] for s in self._stats) / 1e3
            out.span_s = span_s
            # share of wall time spent scraping+parsing (I/O mostly overlaps the load)
            out.busy_fraction = busy_s / span_s if span_s > 0 else None
        return out

    def _cost(self, key: str) -> dict[str, float] | None:
        """One of the scrapes' figures (``scrape_ms``, ``parse_ms``, ``bytes``): mean, p50, max."""
        values = np.array([s[key] for s in self._stats], dtype=float)
        return ({"mean": float(values.mean()), "p50": float(np.median(values)),
                 "max": float(values.max())} if values.size else None)


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes | None:
    """The body, or None once it is larger than ``max_bytes`` (the rest is not read)."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        return None
    chunks, size = [], 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > max_bytes:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _size_words(length: int | None) -> str:
    return f"{length / (1 << 20):.0f} MB announced" if length else "streamed, no length given"


def _snapshot(text: str, raw: RawPage,
              renamed: dict[str, str] | None = None) -> MetricSnapshot:
    page = parse_metrics_text(text)
    if renamed is not None:
        renamed.update(page.renamed)
    return MetricSnapshot(t_ns=raw.t_ns, wall_time=raw.wall_time, samples=page.samples,
                          scrape_ms=raw.scrape_ms)


def read_snapshots(run_dir: Path) -> list[MetricSnapshot]:
    """The snapshots of a run directory, in scrape order ([] when the run has none).

    A run killed before the scraper's ``stop`` has raw pages only: they are parsed here.
    """
    metrics = Path(run_dir) / "metrics"
    out = []
    for data in iter_jsonl(metrics / SNAPSHOTS):
        try:
            out.append(MetricSnapshot.from_dict(data))
        except (KeyError, TypeError):
            break
    if not out:
        for line in iter_jsonl(metrics / RAW):
            with contextlib.suppress(ScrapeError, KeyError, msgspec.ValidationError):
                out.append(_snapshot(line.pop("text"),
                                     msgspec.convert(line, RawPage, strict=False)))
    return sorted(out, key=lambda s: s.t_ns)
