"""``decomposition.json``: a load run's TTFT and E2E split (``analysis.decompose``) as the file
holds it, read back typed (``show`` prints it again from here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from latscope.analysis.decompose import Component, Decomposition
from latscope.errors import ConfigError
from latscope.results import FindingEntry

SCHEMA_VERSION = 1  # absent from the files written so far: 1
FILE = "decomposition.json"


class DecompositionFile(msgspec.Struct, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    components: list[Component]  # the tree: each part's mean, percentiles, share and source
    dominant_ttft: str | None  # key of the largest leaf of client TTFT
    dominant_e2e: str | None
    window_s: float | None  # server window (first to last scrape)
    server_source: str  # histograms | per-request | histograms+per-request | none
    client_requests: int
    server_requests: float | None
    notes: list[str] = []
    gauges: dict[str, float | None] = {}  # peak server gauges in the window
    scrape: dict[str, Any] | None = None  # the scraper's status and overhead (server.scrape)
    findings: list[FindingEntry] = []  # this run's findings when it was split
    per_request: dict[str, Any] | None = None  # the join with the server's spans (rows apart)

    def decomposition(self) -> Decomposition:
        """The split as the renderers take it (its per-request rows are not kept here)."""
        return Decomposition(self.components, self.dominant_ttft, self.dominant_e2e,
                             self.window_s, self.server_source, self.client_requests,
                             self.server_requests, notes=list(self.notes),
                             gauges=dict(self.gauges), scrape=self.scrape)


def read_decomposition(path: Path) -> DecompositionFile:
    """A decomposition.json, typed; a ``ConfigError`` in one line for one latscope did not
    write."""
    from latscope.rundir import read_json

    try:
        return msgspec.convert(read_json(path), DecompositionFile, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: not a decomposition latscope wrote ({exc})") from None
