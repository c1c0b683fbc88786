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

import orjson
from rich.console import Console

from latscope.errors import ConfigError
from latscope.rundir import MANIFEST, SCHEMA_VERSION, RunDir, read_json, write_bytes

FORMATS = ("text", "md", "html", "json", "files")
PAGES = {"md": "report.md", "html": "report.html"}  # what ``files`` rewrites


@dataclass(frozen=True)
class KindView:
    """How one kind of run is read and which renderings it has."""

    main: str  # the run's main document
    read: Callable[[RunDir, Any], Any]  # (run, main document's JSON) -> its typed model
    json: Callable[[Any], Any]  # the typed model as its file's JSON values
    md: Callable[[Any], str] | None = None
    html: Callable[[Any], str] | None = None
    newest: int = 1  # the newest version of the main document this latscope reads
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


def _report(_: RunDir, data: Any) -> Any:
    from latscope.report.write import typed_report

    return typed_report(data)


def _fleet(_: RunDir, data: Any) -> Any:
    from latscope.report.fleet import typed_fleet_report

    return typed_fleet_report(data)


def _summary(run: RunDir, data: Any) -> Any:
    from latscope.runfiles import summary_of

    return summary_of(data, str(run.file("summary.json")))


def _sweep(run: RunDir, _: Any) -> Any:
    from latscope.analysis.sweepfile import read_sweep

    return read_sweep(run.file("sweep.json"))


def _tune(run: RunDir, _: Any) -> Any:
    from latscope.analysis.tune import TuneState

    return TuneState.load(run.path)


def _comparison(run: RunDir, data: Any) -> Any:
    from latscope.analysis.compare_model import load_comparison

    try:
        return load_comparison(data)
    except ValueError as exc:
        raise ConfigError(f"{run.file('compare.json')}: {exc}") from None


def _trace(run: RunDir, data: Any) -> Any:
    import msgspec

    from latscope.trace.files import TraceRunFile, from_json

    try:
        return from_json(data, TraceRunFile)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{run.file('trace.json')}: not a trace run latscope wrote "
                          f"({exc})") from None


def _builtins(model: Any) -> Any:
    from latscope.results import to_json_builtins

    return to_json_builtins(model)


def _as_read(_: RunDir, data: Any) -> Any:
    return data


def _same(data: Any) -> Any:
    return data


def _md(model: Any) -> str:
    from latscope.report.markdown import render_markdown

    return render_markdown(model)


def _html(model: Any) -> str:
    from latscope.report.html import render_html

    return render_html(model)


def _fleet_md(model: Any) -> str:
    from latscope.report.fleet import render_fleet_markdown

    return render_fleet_markdown(model)


def _fleet_html(model: Any) -> str:
    from latscope.report.fleethtml import render_fleet_html

    return render_fleet_html(model)


def _compare_md(model: Any) -> str:
    from latscope.report.compare_md import render_markdown

    return render_markdown(model)


def _compare_html(model: Any) -> str:
    from latscope.report.compare_html import render_html

    return render_html(model)


def _trace_json(model: Any) -> Any:
    from latscope.trace.files import as_json

    return as_json(model)


_DIAGNOSE = KindView("report.json", _report, lambda r: r.to_dict(), _md, _html)
KINDS: dict[str, KindView] = {
    "diagnose": _DIAGNOSE,  # a passive one (diagnose --passive) too
    "watch": _DIAGNOSE,  # a watch's run directory is a passive diagnose's
    "fleet": KindView("report.json", _fleet, lambda r: r.to_dict(), _fleet_md, _fleet_html),
    "compare": KindView("compare.json", _comparison, lambda c: c.to_dict(), _compare_md,
                        _compare_html),
    "bench": KindView("summary.json", _summary, _builtins),
    "sweep": KindView("sweep.json", _sweep, _builtins),
    "tune": KindView("tune.json", _tune, lambda s: s.file_data(), newest=2,
                     version_key="version"),
    "trace": KindView("trace.json", _trace, _trace_json),
    # no model yet: their file as the verb wrote it (and printed it with --json)
    "doctor": KindView("doctor.json", _as_read, _same),
    "net": KindView("net.json", _as_read, _same),
    "logs": KindView("log.json", _as_read, _same),
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
    from latscope.report.show import show

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
    if isinstance(version, int) and version > view.newest:
        raise ConfigError(f"{path}: {view.version_key} {version} is newer than this latscope "
                          f"reads ({view.newest}): a newer latscope wrote it")
    return data
