"""Findings, rendered: a list for the terminal (readable at 80 columns) and plain JSON for files.

Every verb that diagnoses something (``logs``, ``trace``, ``doctor``, ``net``, ``sweep``) hands a
list of ``Finding`` here, so they all look and serialise the same way.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import orjson
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from latscope.findings.impact import describe
from latscope.findings.rank import sort_findings
from latscope.model import Evidence, Finding, Severity
from latscope.report.text import make_console

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


def _evidence_lines(evidence: list[Evidence]) -> tuple[list[str], str]:
    """``name = value (source)`` per item; the source most items share is said once, above."""
    counts = Counter(e.source for e in evidence if e.source)
    common, n = counts.most_common(1)[0] if counts else ("", 0)
    if n < 2 and len(evidence) > 1:
        common = ""
    lines = [f"{e.name} = {format_value(e)}"
             + (f" ({e.source})" if e.source and e.source != common else "") for e in evidence]
    return lines, common


def _finding_body(f: Finding) -> RenderableType:
    """One finding as a short block: title (and id) first, then why, evidence, fix, source."""
    parts: list[RenderableType] = [Text.assemble((f.title, "bold"), "  ", (f"[{f.id}]", "dim"))]
    if f.why:
        parts.append(Text(f.why))
    if f.impact:
        parts.append(_labelled("impact", Text(describe(f.impact))))
    if f.evidence:
        lines, common = _evidence_lines(f.evidence)
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for line in lines:
            grid.add_row("-", Text(line))
        head = "evidence" + (f" ({common})" if common else "")
        parts.append(Group(Text(head + ":", style="dim"), grid))
    if f.fix:
        parts.append(_labelled("fix", Text(f.fix)))
    if f.reference:
        parts.append(_labelled("source", Text(f.reference, style="dim")))
    return Group(*parts)


def _labelled(label: str, body: Text) -> Text:
    return Text.assemble((f"{label}: ", "dim"), body)


def findings_table(findings: Iterable[Finding], *, title: str = "Findings",
                   show_ok: bool = False) -> Table:
    """Findings as a list: severity beside each block, the block's text wrapped at word
    boundaries in the rest of the line (a 4-column table at 80 columns chops words into
    columns a few characters wide)."""
    table = Table.grid(padding=(0, 1))
    table.title = title
    table.title_justify = "left"
    table.add_column(no_wrap=True, width=8)
    table.add_column(overflow="fold")
    shown = [f for f in sort_findings(list(findings))
             if show_ok or f.severity not in (Severity.OK, Severity.SKIPPED)]
    for i, f in enumerate(shown):
        if i:
            table.add_row("", "")
        table.add_row(Text(f.severity.value, style=_STYLE[f.severity]), _finding_body(f))
    return table


def print_findings(findings: list[Finding], console: Console | None = None, *,
                   title: str = "Findings", show_ok: bool = False) -> None:
    console = console or make_console()
    shown = [f for f in findings if show_ok or f.severity not in (Severity.OK, Severity.SKIPPED)]
    if not shown:
        console.print(f"[green]{title}: nothing found[/green]")
        return
    console.print(Text(title, style="bold"))
    console.print(findings_table(findings, title=None, show_ok=show_ok))  # type: ignore[arg-type]


def findings_to_json(findings: list[Finding]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in sort_findings(findings)]


def write_findings(path: Path, findings: list[Finding]) -> None:
    path.write_bytes(orjson.dumps(findings_to_json(findings), option=orjson.OPT_INDENT_2))


def read_findings(path: Path) -> list[Finding]:
    return [Finding.from_dict(d) for d in orjson.loads(path.read_bytes())]
