"""What every report renderer needs from a report (``latscope.report.model.Report``, schema in
docs/report.md): the version check of a report.json dict, the refusal of impossible numbers,
and the two shapes derived from it (TTFT leaves for the stacked bars, the component tree for
tables).

Renderers call ``check_report`` first, so an impossible share is refused, never printed.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from msgspec import UnsetType

from latscope.errors import LatscopeError
from latscope.findings.rank import display_group
from latscope.report.model import (
    SCHEMA_VERSION,
    ComponentRow,
    DecompositionView,
    FindingEntry,
    Report,
)

SEVERITIES = ("critical", "warning", "info", "ok", "skipped")
# Findings shown in the main, ranked list; "ok" and "skipped" are the checks that ran or could not.
# Rounding in the producer may give 1.0004; more than this is a bug upstream, not noise.
_SHARE_TOLERANCE = 0.005


class ReportError(LatscopeError):
    """A report.json that cannot be rendered: unknown version, missing key, impossible number."""


def check_version(report: Any) -> None:
    if not isinstance(report, dict):
        raise ReportError("report.json: expected a JSON object")
    version = report.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportError(f"report.json schema_version {version!r} is not supported "
                          f"(this latscope reads version {SCHEMA_VERSION})")


def check_report(report: Report) -> None:
    """Raise ReportError unless ``report`` is a schema-1 report whose numbers are possible."""
    if report.schema_version != SCHEMA_VERSION:
        raise ReportError(f"report.json schema_version {report.schema_version!r} is not "
                          f"supported (this latscope reads version {SCHEMA_VERSION})")
    if report.verdict is None:
        raise ReportError("report.json: verdict.text is missing")
    for where, share in _shares(report):
        if share is None:
            continue
        if not isinstance(share, (int, float)) or not math.isfinite(share):
            raise ReportError(f"report.json: {where} share {share!r} is not a number")
        if share > 1 + _SHARE_TOLERANCE:
            raise ReportError(f"report.json: {where} share {share:.1%} is above 100%: refused")
    for f in report.findings:
        if f.severity not in SEVERITIES:
            raise ReportError(f"report.json: finding {f.id!r} has severity {f.severity!r}")


def _shares(report: Report) -> Iterator[tuple[str, Any]]:
    if report.verdict is not None:
        share = report.verdict.share
        yield "verdict", None if isinstance(share, UnsetType) else share
    for f in report.findings:
        yield f"finding {f.id}", (f.impact or {}).get("share")
    for d in report.decompositions:
        for c in d.components:
            yield f"decomposition {d.label} {c.key}", c.share
    if report.trace is not None:
        for name, share in report.trace.breakdown.items():
            yield f"trace breakdown {name}", share
        for cat in report.trace.categories:
            yield f"trace category {cat.name}", cat.share
    for r in report.cross_rank.ranks if report.cross_rank is not None else []:
        yield f"cross-rank rank {r.rank} idle_share", r.idle_share
        yield f"cross-rank rank {r.rank} comm_share", r.comm_share
        yield f"cross-rank rank {r.rank} exposed_comm_share", r.exposed_comm_share
        yield f"cross-rank rank {r.rank} wait_share", r.wait_share


def ttft_leaves(decomposition: DecompositionView) -> list[ComponentRow]:
    """The parts of client TTFT that add up to it: children of "ttft" and of "ttft.server",
    without "ttft.server" itself (it is the sum of its own children)."""
    return [c for c in decomposition.components
            if c.parent in ("ttft", "ttft.server") and c.key != "ttft.server"]


def component_tree(components: list[ComponentRow]) -> list[tuple[int, ComponentRow]]:
    """(depth, component) in depth-first order; roots are components whose parent is absent."""
    keys = {c.key for c in components}
    children: dict[str | None, list[ComponentRow]] = {}
    for c in components:
        parent = c.parent if c.parent in keys else None
        children.setdefault(parent, []).append(c)
    out: list[tuple[int, ComponentRow]] = []
    seen: set[int] = set()  # a parent cycle in bad input must not loop forever

    def walk(parent: str | None, depth: int) -> None:
        for c in children.get(parent, []):
            if id(c) in seen:
                continue
            seen.add(id(c))
            out.append((depth, c))
            walk(c.key, depth + 1)

    walk(None, 0)
    return out


def shown(findings: list[FindingEntry]) -> list[FindingEntry]:
    """The ranked list every renderer shows first (``findings.rank.display_group``)."""
    return [f for f in findings if display_group(f.severity, f.impact) == "shown"]


def more(findings: list[FindingEntry]) -> list[FindingEntry]:
    """Information below the shown list's bar, listed after it."""
    return [f for f in findings if display_group(f.severity, f.impact) == "more"]


def checks(findings: list[FindingEntry]) -> list[FindingEntry]:
    """Checks that passed or could not run."""
    return [f for f in findings if display_group(f.severity, f.impact) == "check"]
