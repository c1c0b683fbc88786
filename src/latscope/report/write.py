"""Writes a run's three reports: report.json (the data), report.html and report.md (renderings).

The renderers take the typed report (``report.model.Report``): a report.json dict is converted
once, here (``typed_report``), and one that does not fit the model (an older or corrupt file
given to ``latscope report DIR``) is refused in one line naming the field.

report.json goes first, so the results survive a renderer that refuses them (an impossible
share) or fails; every file is written to a temporary name and renamed, so a reader (or a
Ctrl-C) never sees half a report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import orjson

from latscope.errors import ConfigError
from latscope.report.model import Report, load_report
from latscope.report.schema import ReportError, check_version
from latscope.rundir import write_bytes

REPORT_JSON, REPORT_HTML, REPORT_MD = "report.json", "report.html", "report.md"


def write_reports(run_dir: str | Path, report: dict[str, Any]) -> dict[str, Path]:
    """Write report.json, report.html and report.md into ``run_dir``; returns their paths."""
    from latscope.report.html import render_html
    from latscope.report.markdown import render_markdown

    check_version(report)
    if report.get("kind") == "fleet":  # a fleet's report has its own model (docs/fleet.md)
        from latscope.report.fleet import write_fleet_reports

        return write_fleet_reports(run_dir, report)
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {run_dir}: {exc.strerror}") from None
    paths = {"json": run_dir / REPORT_JSON, "html": run_dir / REPORT_HTML,
             "md": run_dir / REPORT_MD}
    write_bytes(paths["json"], orjson.dumps(report, option=orjson.OPT_INDENT_2
                                              | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    typed = typed_report(report)  # after report.json: the results survive a misfit too
    write_bytes(paths["html"], render_html(typed).encode())
    write_bytes(paths["md"], render_markdown(typed).encode())
    return paths


def typed_report(report: dict[str, Any]) -> Report:
    """A report.json dict as the model the renderers take; ReportError in one line (the field
    msgspec names) for one of another version or that does not fit."""
    check_version(report)
    if report.get("report_error"):  # diagnose could not type it: say why, not which field
        raise ReportError(f"this run's report could not be rendered: {report['report_error']} "
                          "(report.json holds every section as produced)")
    try:
        return load_report(report)
    except msgspec.ValidationError as exc:
        raise ReportError(f"report.json does not fit this latscope's report model: {exc}") from None

