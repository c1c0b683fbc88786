"""The terminal view of a diagnose report: verdict, the client's reliability, ranked findings,
proven fixes, proposals. Plain text wrapped to 80 columns, the same on a tty and in a log file."""

from __future__ import annotations

import shutil
import sys
import textwrap
from typing import Any

from msgspec import UnsetType

from latscope.findings.impact import describe
from latscope.report.model import CrossRank, Experiment, FindingEntry, Guard, Report
from latscope.report.schema import shown

WIDTH = 80
MAX_FINDINGS = 8


def _wrap(text: str, indent: str = "", first: str | None = None, width: int = WIDTH) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=first if first is not None else indent,
                         subsequent_indent=indent, break_long_words=True,
                         break_on_hyphens=False) or [first or indent]


def render_text(report: Report, width: int = WIDTH) -> str:
    lines: list[str] = []
    verdict = report.verdict
    head = "HEALTHY" if verdict is not None and verdict.healthy else "VERDICT"
    lines += _wrap(verdict.text if verdict is not None else "no verdict", "  ", f"{head}: ",
                   width)
    lines.append("")
    client = report.client
    if client is not None and client.reliable is False:
        load = f"{client.load:g}" if isinstance(client.load, (int, float)) else "?"
        lines += _wrap(f"client-side timing unreliable at c={load}: "
                       f"{client.why}; network and frontend are not blamed. "
                       f"Fix: {client.fix}", "  ", "! ", width)
    if client is not None and client.same_host:
        lines += _wrap("client and server share this host (loopback): no network distance "
                       "between them", "  ", "i ", width)
    lines += _window_lines(report, width)
    findings = shown(report.findings)
    if findings:
        lines += ["", "Findings (ranked):"]
    for i, f in enumerate(findings[:MAX_FINDINGS], 1):
        lines += _finding_lines(i, f, width)
    if len(findings) > MAX_FINDINGS:
        lines.append(f"  ... {len(findings) - MAX_FINDINGS} more in report.md")
    rest = len(report.findings) - min(len(findings), MAX_FINDINGS)
    if rest > 0:
        lines.append(f"  ({rest} more: information and passed checks, in report.md)")
    lines += _experiment_lines(report.experiments, width)
    lines += _cross_rank_lines(report.cross_rank, width)
    for p in report.proposals:
        lines += _wrap(f"to prove {p.finding_id} ({p.change}): {p.command}", "    ",
                       "  - ", width)
    if report.notes:
        lines.append("")
        for note in report.notes:
            lines += _wrap(note, "    ", "  note: ", width)
    return "\n".join(lines)


def _window_lines(report: Report, width: int) -> list[str]:
    """A passive run's window: the traffic, latencies with bounds, spikes, what was sent."""
    from latscope.report.window import window_text_lines

    if isinstance(report.window, UnsetType):
        return []
    out = [""]
    for kind, text in window_text_lines(report.window):
        if kind == "head":
            out.append(text)
        else:
            out += _wrap(text, "      " if kind == "row" else "    ", "  - " if kind == "row"
                         else "  ", width)
    return out


def _finding_lines(i: int, f: FindingEntry, width: int) -> list[str]:
    out = _wrap(f"{f.severity.upper()} {f.title}", "     ", f"{i:>2}. ", width)
    impact = describe(f.impact)
    if impact:
        out += _wrap(f"impact: {impact}", "       ", "     ", width)
    for e in f.evidence[:4]:
        value = f"{e.value:.4g}" if isinstance(e.value, float) else str(e.value)
        unit = f" {e.unit}" if e.unit else ""
        src = f" ({e.source})" if e.source else ""
        out += _wrap(f"{e.name} = {value}{unit}{src}", "         ", "     - ", width)
    if f.fix:
        out += _wrap(f"fix: {f.fix}", "       ", "     ", width)
    return out


def _experiment_lines(experiments: list[Experiment], width: int) -> list[str]:
    if not experiments:
        return []
    out = ["", "Fixes measured (A/B, alternating, warm-up excluded, fresh prompts per run):"]
    for e in experiments:
        if e.change_pct is None:
            out += _wrap(f"{e.finding_id}: {e.change}: {e.note or e.verdict}",
                         "    ", "  - ", width)
            continue
        ci = e.ci95_pct
        interval = f" (95% CI {ci[0]:+.1f}% .. {ci[1]:+.1f}%)" if ci else ""
        word = e.words()
        out += _wrap(f"{e.finding_id}: {e.change} at c={e.load:g}: {e.metric} "
                     f"{e.a_mean or 0.0:.1f} -> {e.b_mean or 0.0:.1f} ({e.change_pct:+.1f}%)"
                     f"{interval}: {word}"
                     + _guard_text(None if isinstance(e.guard, UnsetType) else e.guard)
                     + (f"; {e.note}" if e.note else ""),
                     "    ", "  - ", width)
    return out


def _cross_rank_lines(section: CrossRank | None, width: int) -> list[str]:
    """One line per rank (the table is in report.md / report.html), then the sentences."""
    from latscope.report.ranks import RANK_COLUMNS, cross_rank_sentences, rank_rows

    if not section:
        return []
    out = ["", "Ranks (one profile trace per rank):"]
    for cells in rank_rows(section):
        named = ", ".join(f"{col} {cell}" for col, cell in zip(RANK_COLUMNS[1:], cells[1:]))
        out += _wrap(f"{cells[0]}: {named}", "      ", "  - ", width)
    for sentence in cross_rank_sentences(section):
        out += _wrap(sentence, "    ", "  ", width)
    return out


def _guard_text(guard: Guard | None) -> str:
    """The metric the fix must not make much worse, e.g. long requests' E2E for the gateway."""
    if guard is None or guard.change_pct is None:
        return ""
    ci = guard.ci95_pct
    interval = f" (95% CI {ci[0]:+.1f}% .. {ci[1]:+.1f}%)" if ci else ""
    return f"; {guard.metric} {guard.change_pct:+.1f}%{interval}"


def print_report(report: Report, file: Any = None) -> None:
    file = file or sys.stdout
    width = WIDTH
    if file.isatty():
        width = max(WIDTH, min(120, shutil.get_terminal_size((WIDTH, 24)).columns))
    print(render_text(report, width), file=file)
    where = report.run_dir
    if where:
        print(f"\nreport: {where}/report.html (also report.md, report.json)", file=file)
