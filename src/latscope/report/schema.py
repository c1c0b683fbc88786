"""What every report renderer needs from a ``report.json`` dict (schema in docs/report.md):
the version check, the refusal of impossible numbers, and the two shapes derived from it
(TTFT leaves for the stacked bars, the component tree for tables).

Renderers call ``check_report`` first, so an impossible share is refused, never printed.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from latscope.errors import LatscopeError

SCHEMA_VERSION = 1
SEVERITIES = ("critical", "warning", "info", "ok", "skipped")
# Findings shown in the main, ranked list; "ok" and "skipped" are the checks that ran or could not.
ACTIONABLE = ("critical", "warning", "info")
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


def check_report(report: dict[str, Any]) -> None:
    """Raise ReportError unless ``report`` is a schema-1 report whose numbers are possible."""
    check_version(report)
    if not isinstance(report.get("verdict"), dict) or "text" not in report["verdict"]:
        raise ReportError("report.json: verdict.text is missing")
    for where, share in _shares(report):
        if share is None:
            continue
        if not isinstance(share, (int, float)) or not math.isfinite(share):
            raise ReportError(f"report.json: {where} share {share!r} is not a number")
        if share > 1 + _SHARE_TOLERANCE:
            raise ReportError(f"report.json: {where} share {share:.1%} is above 100%: refused")
    for f in report.get("findings") or []:
        if f.get("severity") not in SEVERITIES:
            raise ReportError(f"report.json: finding {f.get('id')!r} has severity "
                              f"{f.get('severity')!r}")


def _shares(report: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    yield "verdict", report["verdict"].get("share")
    for f in report.get("findings") or []:
        yield f"finding {f.get('id')}", (f.get("impact") or {}).get("share")
    for d in report.get("decompositions") or []:
        for c in d.get("components") or []:
            yield f"decomposition {d.get('label')} {c.get('key')}", c.get("share")
    trace = report.get("trace") or {}
    for name, share in (trace.get("breakdown") or {}).items():
        yield f"trace breakdown {name}", share
    for c in trace.get("categories") or []:
        yield f"trace category {c.get('name')}", c.get("share")
    for r in (report.get("cross_rank") or {}).get("ranks") or []:
        for key in ("idle_share", "comm_share", "exposed_comm_share", "wait_share"):
            yield f"cross-rank rank {r.get('rank')} {key}", r.get(key)


def ttft_leaves(decomposition: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of client TTFT that add up to it: children of "ttft" and of "ttft.server",
    without "ttft.server" itself (it is the sum of its own children)."""
    return [c for c in decomposition.get("components") or []
            if c.get("parent") in ("ttft", "ttft.server") and c.get("key") != "ttft.server"]


def component_tree(components: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(depth, component) in depth-first order; roots are components whose parent is absent."""
    keys = {c.get("key") for c in components}
    children: dict[Any, list[dict[str, Any]]] = {}
    for c in components:
        parent = c.get("parent") if c.get("parent") in keys else None
        children.setdefault(parent, []).append(c)
    out: list[tuple[int, dict[str, Any]]] = []
    seen: set[int] = set()  # a parent cycle in bad input must not loop forever

    def walk(parent: Any, depth: int) -> None:
        for c in children.get(parent, []):
            if id(c) in seen:
                continue
            seen.add(id(c))
            out.append((depth, c))
            walk(c.get("key"), depth + 1)

    walk(None, 0)
    return out


def actionable(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f.get("severity") in ACTIONABLE]


def checks(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f.get("severity") not in ACTIONABLE]
