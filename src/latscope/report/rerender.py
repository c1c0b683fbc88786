"""Any run directory rendered again from disk (``latscope report DIR --format F``; ``latscope
show DIR`` is its ``text``): one table of kinds, each with its main document, the typed reader
that already exists for it and the renderers the project has for it. No renderer lives here.

- ``text``: the terminal view (``report.show``), every kind, a run cut short included;
- ``json``: the main document re-encoded from its typed model (doctor, net and logs have no
  model: their file as read), one JSON value;
- ``md``, ``html``: the kinds with such renderers (diagnose, watch, fleet, compare); another
  kind is refused in one line naming the formats it has, never given a half-empty page;
- ``files``: report.md and report.html rewritten beside the main document (what ``latscope
  report DIR`` always did), the default for the kinds that have them.

Every refusal (a folder latscope did not write, a missing or corrupt main document, a newer
schema, a format the kind lacks) is one ``LatscopeError`` line, raised before anything is
written: each page is rendered whole, then written.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import msgspec
import orjson
from rich.console import Console

from latscope.analysis import compare_model, sweepfile
from latscope.analysis.compare_model import Comparison, load_comparison
from latscope.analysis.sweepfile import SweepFile, read_sweep
from latscope.analysis.tune import STATE_VERSION, TuneState
from latscope.errors import ConfigError
from latscope.report import compare_html, compare_md
from latscope.report.fleet import render_fleet_markdown, typed_fleet_report
from latscope.report.fleethtml import render_fleet_html
from latscope.report.fleetmodel import FLEET_SCHEMA_VERSION, FleetReport
from latscope.report.html import render_html
from latscope.report.markdown import render_markdown
from latscope.report.model import SCHEMA_VERSION as REPORT_VERSION
from latscope.report.model import Report
from latscope.report.show import show
from latscope.report.write import typed_report
from latscope.results import to_json_builtins
from latscope.rundir import (
    MANIFEST,
    SCHEMA_VERSION,
    SUMMARY_SCHEMA_VERSION,
    RunDir,
    read_json,
    write_bytes,
)
from latscope.runfiles import BenchSummary, summary_of
from latscope.trace import files as tracefiles
from latscope.trace.files import TraceRunFile, as_json, from_json

FORMATS = ("text", "md", "html", "json", "files")
PAGES = {"md": "report.md", "html": "report.html"}  # what ``files`` rewrites


@dataclass(frozen=True)
class KindView:
    """How one kind of run is read and which renderings it has."""

    main: str  # the run's main document
    newest: int | None  # the newest version of it this latscope reads (None: not versioned)
    read: Callable[[RunDir, Any], Any]  # (run, main document's JSON) -> its typed model
    json: Callable[[Any], Any]  # the typed model as its file's JSON values
    md: Callable[[Any], str] | None = None
    html: Callable[[Any], str] | None = None
    version_key: str = "schema_version"

    def formats(self) -> tuple[str, ...]:
        pages = tuple(f for f in ("md", "html") if getattr(self, f) is not None)
        return ("text", *pages, "json", *(("files",) if pages else ()))

    def page(self, fmt: str) -> Callable[[Any], str]:
        """The md or html renderer (``_view`` has checked the kind has it)."""
        renderer = self.md if fmt == "md" else self.html
        if renderer is None:
            raise ConfigError(f"no {fmt} renderer")  # unreachable past ``_view``
        return renderer


def _report(_: RunDir, data: Any) -> Report:
    return typed_report(data)


def _fleet(_: RunDir, data: Any) -> FleetReport:
    return typed_fleet_report(data)


def _summary(run: RunDir, data: Any) -> BenchSummary:
    return summary_of(data, str(run.file("summary.json")))


def _sweep(run: RunDir, _: Any) -> SweepFile:
    return read_sweep(run.file("sweep.json"))


def _tune(run: RunDir, _: Any) -> TuneState:
    return TuneState.load(run.path)


def _comparison(run: RunDir, data: Any) -> Comparison:
    try:
        return load_comparison(data)
    except ValueError as exc:
        raise ConfigError(f"{run.file('compare.json')}: {exc}") from None


def _trace(run: RunDir, data: Any) -> TraceRunFile:
    try:
        return from_json(data, TraceRunFile)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{run.file('trace.json')}: not a trace run latscope wrote "
                          f"({exc})") from None


def _as_read(_: RunDir, data: Any) -> Any:
    return data


def _same(data: Any) -> Any:
    return data


_DIAGNOSE = KindView("report.json", REPORT_VERSION, _report, Report.to_dict, render_markdown,
                     render_html)
KINDS: dict[str, KindView] = {
    "diagnose": _DIAGNOSE,  # a passive one (diagnose --passive) too
    "watch": _DIAGNOSE,  # a watch's run directory is a passive diagnose's
    "fleet": KindView("report.json", FLEET_SCHEMA_VERSION, _fleet, FleetReport.to_dict,
                      render_fleet_markdown, render_fleet_html),
    "compare": KindView("compare.json", compare_model.SCHEMA_VERSION, _comparison,
                        Comparison.to_dict, compare_md.render_markdown, compare_html.render_html),
    "bench": KindView("summary.json", SUMMARY_SCHEMA_VERSION, _summary, to_json_builtins),
    "sweep": KindView("sweep.json", sweepfile.SCHEMA_VERSION, _sweep, to_json_builtins),
    "tune": KindView("tune.json", STATE_VERSION, _tune, TuneState.file_data,
                     version_key="version"),
    "trace": KindView("trace.json", tracefiles.SCHEMA_VERSION, _trace, as_json),
    # no model and no version yet: their file as the verb wrote it (and printed with --json)
    "doctor": KindView("doctor.json", None, _as_read, _same),
    "net": KindView("net.json", None, _as_read, _same),
    "logs": KindView("log.json", None, _as_read, _same),
}


def open_run(path: str | Path) -> RunDir:
    """The run directory at ``path``. A folder holding a report.json and no manifest (a report
    copied out of its run: ``latscope report`` has always rendered those) is the run its
    report.json names (diagnose, the default, or fleet)."""
    path = Path(path)
    if path.is_dir() and not (path / MANIFEST).exists() and (path / "report.json").is_file():
        data = read_json(path / "report.json")
        kind = data.get("kind") if isinstance(data, dict) else None
        return RunDir(path, {"schema_version": SCHEMA_VERSION,
                             "kind": kind if kind == "fleet" else "diagnose"})
    return RunDir.open(path)


def formats_of(kind: str) -> tuple[str, ...]:
    """The formats a run of ``kind`` renders to (text for any kind)."""
    view = KINDS.get(kind)
    return view.formats() if view is not None else ("text",)


def default_format(kind: str) -> str:
    """``files`` where the kind has report.md and report.html to rewrite (what ``latscope
    report DIR`` has always done: scripts and docs rely on it), ``text`` elsewhere."""
    return "files" if "files" in formats_of(kind) else "text"


def render(run: RunDir, fmt: str) -> str:
    """The run rendered as ``fmt`` (md, html or json), whole; a one-line error otherwise."""
    view = _view(run, fmt)
    model = view.read(run, _main_document(run, view))
    if fmt == "json":
        return orjson.dumps(view.json(model), option=orjson.OPT_INDENT_2
                            | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
    return view.page(fmt)(model)


def rewrite_pages(run: RunDir) -> dict[str, Path]:
    """report.md and report.html rewritten from the main document; both are rendered before
    either is written, so a refusal leaves the old pair as it was."""
    view = _view(run, "files")
    model = view.read(run, _main_document(run, view))
    pages = {fmt: view.page(fmt)(model) for fmt in PAGES}
    paths = {}
    for fmt, name in PAGES.items():
        paths[fmt] = run.file(name)
        write_bytes(paths[fmt], pages[fmt].encode())
    return paths


def text_view(run: RunDir, console: Console | None = None, *, show_ok: bool = False) -> str:
    """The terminal view as text, whole (a refusal half-way prints nothing): laid out for
    ``console`` (colour on a terminal), or for a file: 80 columns, no colour codes."""
    if console is None:
        console = Console(file=io.StringIO(), width=80, color_system=None, highlight=False,
                          emoji=False, force_terminal=False)
    with console.capture() as captured:
        show(run, console, show_ok=show_ok)
    return captured.get()


def _view(run: RunDir, fmt: str) -> KindView:
    kind = run.kind or "unknown"
    view = KINDS.get(kind)
    if view is None or fmt not in view.formats():
        has = formats_of(kind)
        raise ConfigError(f"{run.path}: a {kind} run has no {fmt} rendering "
                          f"(it has {', '.join(has)})")
    return view


def _main_document(run: RunDir, view: KindView) -> Any:
    """The main document's JSON, checked: there, JSON, and of a version this latscope reads.
    A bench killed before its summary gets the one ``show`` rebuilds from its records."""
    path = run.file(view.main)
    if not path.is_file():
        if run.kind == "bench" and run.file("requests.jsonl").is_file():
            from latscope.load.summary import rebuild_summary

            return rebuild_summary(run.path)
        raise ConfigError(f"{path}: not found (the {run.kind} run did not finish? "
                          "--format text shows what it gathered)")
    data = read_json(path)
    version = data.get(view.version_key) if isinstance(data, dict) else None
    if view.newest is not None and isinstance(version, int) and version > view.newest:
        raise ConfigError(f"{path}: {view.version_key} {version} is newer than this latscope "
                          f"reads ({view.newest}): a newer latscope wrote it")
    return data
