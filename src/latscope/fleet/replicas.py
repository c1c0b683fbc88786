"""Each replica's ``/metrics`` scraped by latscope during a load run sent through their
balancer: one ``MetricsScraper`` per replica, each writing to its own folder of the run
directory (``replicas/<host_port>/metrics/``), so the fleet's rules read the replicas of an
active run the way they read them from Prometheus."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from urllib.parse import urlsplit

from latscope.errors import ConfigError
from latscope.model import MetricSnapshot, RunContext
from latscope.server.scrape import MetricsScraper, read_snapshots

REPLICAS_DIR = "replicas"


def replica_name(url: str) -> str:
    """``host:port`` of a replica URL: what Prometheus calls its ``instance``."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--replica {url}: give the replica's URL, e.g. http://10.0.0.5:8000")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def replica_dir(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / REPLICAS_DIR / re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class ReplicaScrapers:
    """A ``RunObserver`` scraping every replica's ``/metrics`` every ``interval_s``."""

    def __init__(self, urls: list[str], interval_s: float = 1.0) -> None:
        names = [replica_name(u) for u in urls]
        if len(set(names)) != len(names):
            raise ConfigError(f"--replica given twice: {', '.join(names)}")
        self.urls = {name: (u if "://" in u else f"http://{u}").rstrip("/")
                     for name, u in zip(names, urls)}
        self.scrapers = {name: MetricsScraper(interval_s=interval_s, base_url=url)
                         for name, url in self.urls.items()}

    async def start(self, ctx: RunContext) -> None:
        await asyncio.gather(*(s.start(self._ctx(ctx, name))
                               for name, s in self.scrapers.items()))

    async def stop(self, ctx: RunContext) -> None:
        await asyncio.gather(*(s.stop(self._ctx(ctx, name)) for name, s in self.scrapers.items()))

    def _ctx(self, ctx: RunContext, name: str) -> RunContext:
        return dataclasses.replace(ctx, run_dir=replica_dir(ctx.run_dir, name),
                                   base_url=self.urls[name])

    def status(self) -> dict[str, str]:
        """Each replica's scrape status (``ok``, ``unreachable``, ``stats_disabled``, ...)."""
        return {name: s.summary().status for name, s in self.scrapers.items()}


def read_replica_snapshots(run_dir: Path, names: list[str]) -> dict[str, list[MetricSnapshot]]:
    """Each replica's snapshots of a run, from its folder (a scraper killed mid-run: its raw
    pages are parsed here)."""
    return {name: read_snapshots(replica_dir(run_dir, name)) for name in names}
