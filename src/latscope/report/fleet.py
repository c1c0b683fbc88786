"""A fleet diagnosis rendered: the terminal (80 columns, no tty needed), report.md and, through
``report.fleethtml``, report.html; all three from the typed ``FleetReport``. ``write_fleet_reports``
writes report.json first, so the data survive a renderer that refuses it."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import msgspec
import orjson

from latscope.findings.impact import describe
from latscope.report.fleetmodel import FleetReport, ReplicaRow, load_fleet_report
from latscope.report.fleetwords import promql_summary, router_sentence, source_line, window_line
from latscope.report.model import FindingEntry
from latscope.report.schema import ReportError
from latscope.report.units import ms, pct
from latscope.rundir import write_bytes

WIDTH = 80
_ACTING = ("critical", "warning")


def typed_fleet_report(data: dict[str, Any]) -> FleetReport:
    try:
        return load_fleet_report(data)
    except msgspec.ValidationError as exc:
        raise ReportError(f"report.json does not fit this latscope's fleet report: {exc}") from None


def write_fleet_reports(run_dir: str | Path, report: dict[str, Any]) -> dict[str, Path]:
    from latscope.report.fleethtml import render_fleet_html

    run_dir = Path(run_dir)
    paths = {"json": run_dir / "report.json", "html": run_dir / "report.html",
             "md": run_dir / "report.md"}
    write_bytes(paths["json"], orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    typed = typed_fleet_report(report)
    write_bytes(paths["md"], render_fleet_markdown(typed).encode())
    write_bytes(paths["html"], render_fleet_html(typed).encode())
    return paths


def _wrap(text: str, indent: str = "", first: str | None = None) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent if first is None else first,
                         subsequent_indent=indent, break_on_hyphens=False) or [first or ""]


# (header, width, cell) of the terminal's fleet table: 80 columns with one space between
_COLUMNS = (("replica", 21, lambda x: x.name), ("status", 9, lambda x: x.status[:9]),
            ("req/s", 5, lambda x: _num(x.rate_per_s)), ("TTFT", 8, lambda x: ms(x.ttft_mean_ms)),
            ("95% CI", 13, lambda x: _ci(x.ttft_ci_ms)), ("queue", 5, lambda x: pct(x.queue_share)),
            ("ITL", 7, lambda x: ms(x.itl_mean_ms)), ("wait", 4, lambda x: _num(x.mean_waiting)))


def _num(v: Any) -> str:
    return "n/a" if v is None else f"{v:.2f}" if v < 10 else f"{v:.0f}"


def _ci(ci: list[Any] | None) -> str:
    return "n/a" if not ci else f"{ci[0]:.0f}-{ci[1]:.0f} ms"


def fleet_table_lines(replicas: list[ReplicaRow]) -> list[str]:
    def row(cells: list[str]) -> str:
        return " ".join(c[:w].ljust(w) if i < 2 else c[:w].rjust(w)
                        for i, (c, (_, w, _)) in enumerate(zip(cells, _COLUMNS))).rstrip()

    lines = [row([h for h, _, _ in _COLUMNS])]
    lines += [row([cell(x) for _, _, cell in _COLUMNS]) for x in replicas]
    return lines


def render_fleet_text(r: FleetReport) -> str:
    out = [*_wrap(f"latscope fleet: {source_line(r)}"), *_wrap(window_line(r)), ""]
    label = "HEALTHY" if r.verdict.healthy else "VERDICT"
    out += _wrap(r.verdict.text, " " * 9, f"{label}  ")
    out += ["", "Replicas: mean TTFT and its 95% interval, the queue's share of it, mean",
            "ITL, mean requests waiting (Little's law); each replica's own verdict below"]
    out += fleet_table_lines(r.replicas)
    out.append("")
    for x in r.replicas:
        out += _wrap(x.verdict, "    ", f"  {x.name}: ")
    if r.router is not None:
        out += [""] + _wrap(router_sentence(r), "  ", "Router: ")
    acting = [f for f in r.findings if f.severity in _ACTING]
    if acting:
        out += ["", "Findings"]
        for i, f in enumerate(acting, 1):
            out += _finding_lines(i, f)
    out += ["", *_wrap(promql_summary(r.promql))]
    for note in r.notes:
        out += _wrap(note, "    ", "  note: ")
    out.append(f"run directory: {r.run_dir}")
    return "\n".join(out) + "\n"


def _finding_lines(i: int, f: FindingEntry) -> list[str]:
    lines = _wrap(f"[{f.severity}] {f.title}", "     ", f"{i:2d}. ")
    impact = describe(f.impact)
    if impact:
        lines += _wrap(f"impact: {impact}", "     ", "     ")
    for e in f.evidence[:4]:
        lines += _wrap(f"{e.name}: {e.value} {e.unit} ({e.source})", "       ", "     - ")
    if f.fix:
        lines += _wrap(f"fix: {f.fix}", "     ", "     ")
    return lines


def render_fleet_markdown(r: FleetReport) -> str:
    from latscope.report.fleetmd import fleet_markdown

    return fleet_markdown(r)


def print_fleet_report(r: FleetReport, file: Any = None) -> None:
    import sys

    (file or sys.stdout).write(render_fleet_text(r))
