"""Findings, rendered: a rich table for the terminal and plain JSON for files.

Every verb that diagnoses something (``logs``, ``trace``, ``doctor``, ``net``, ``sweep``) hands a
list of ``Finding`` here, so they all look and serialise the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import orjson
from rich.console import Console
from rich.table import Table

from latscope.model import Evidence, Finding, Severity, sort_findings

_STYLE = {
    Severity.CRITICAL: "bold red",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
    Severity.OK: "green",
    Severity.SKIPPED: "dim",
}


def format_value(ev: Evidence) -> str:
    value = ev.value
    if isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return f"{text} {ev.unit}".strip()


def findings_table(findings: Iterable[Finding], *, title: str = "Findings",
                   show_ok: bool = False) -> Table:
    table = Table(title=title, show_lines=True, expand=False)
    table.add_column("severity", no_wrap=True)
    table.add_column("finding")
    table.add_column("evidence")
    table.add_column("fix")
    for f in sort_findings(list(findings)):
        if f.severity in (Severity.OK, Severity.SKIPPED) and not show_ok:
            continue
        evidence = "\n".join(
            f"{e.name} = {format_value(e)}" + (f"  [dim]({e.source})[/dim]" if e.source else "")
            for e in f.evidence
        )
        body = f"[bold]{f.title}[/bold]\n[dim]{f.id}[/dim]"
        if f.why:
            body += f"\n{f.why}"
        fix = f.fix + (f"\n[dim]source: {f.reference}[/dim]" if f.reference else "")
        table.add_row(f"[{_STYLE[f.severity]}]{f.severity.value}[/]", body, evidence, fix)
    return table


def print_findings(findings: list[Finding], console: Console | None = None, *,
                   title: str = "Findings", show_ok: bool = False) -> None:
    console = console or Console()
    shown = [f for f in findings if show_ok or f.severity not in (Severity.OK, Severity.SKIPPED)]
    if not shown:
        console.print(f"[green]{title}: nothing found[/green]")
        return
    console.print(findings_table(findings, title=title, show_ok=show_ok))


def findings_to_json(findings: list[Finding]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in sort_findings(findings)]


def write_findings(path: Path, findings: list[Finding]) -> None:
    path.write_bytes(orjson.dumps(findings_to_json(findings), option=orjson.OPT_INDENT_2))


def read_findings(path: Path) -> list[Finding]:
    return [Finding.from_dict(d) for d in orjson.loads(path.read_bytes())]
