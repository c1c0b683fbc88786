"""What the findings tests share: the sections (anchors) of docs/findings.md, and how an id maps
to the section that documents it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FINDINGS_DOC = REPO / "docs" / "findings.md"
ANCHOR = re.compile(r'<a id="([^"]+)"></a>')


def doc_anchors() -> set[str]:
    return set(ANCHOR.findall(FINDINGS_DOC.read_text(encoding="utf-8")))


def _anchor_of(finding_id: str, anchors: set[str]) -> str | None:
    """The section that documents ``finding_id``: its own, or its family's for ids with an
    instance suffix (``host.pcie_link.0000:01:00.0`` -> ``host.pcie_link``)."""
    parts = finding_id.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in anchors:
            return candidate
    return None


@pytest.fixture(scope="session")
def anchors() -> set[str]:
    return doc_anchors()


@pytest.fixture(scope="session")
def anchor_of(anchors: set[str]):
    return lambda finding_id: _anchor_of(finding_id, anchors)
