"""What every doctor check shares: its type (a plain function of the facts env/ gathered) and the
two helpers that word a check that could not run and a value read with its source."""

from __future__ import annotations

from typing import Any, Callable

from latscope.env.facts import Facts
from latscope.model import Evidence, Finding, Severity

Check = Callable[[Facts], list[Finding]]


def skipped(check_id: str, reason: str, layer: str) -> Finding:
    return Finding(id=check_id, severity=Severity.SKIPPED, title=f"skipped: {reason}", layer=layer)


def ev(name: str, value: Any, source: str, unit: str = "") -> Evidence:
    return Evidence(name=name, value=value, unit=unit, source=source)
