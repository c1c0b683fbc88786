"""report.html: one self-contained page rendered from the typed report (``report.model``).

No JavaScript and no external asset: the CSS is inlined, the charts are inline SVG (see
``latscope.report.plots``), and a Content-Security-Policy of ``default-src 'none'`` makes the
browser refuse any request the page might still try. All text goes through Jinja2's autoescape:
findings quote logs and servers, so a title may carry markup and must come out as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from latscope.findings.impact import describe
from latscope.report import plots, units
from latscope.report.model import (
    ComponentRow,
    CrossRank,
    DecompositionView,
    Number,
    Report,
    TelemetrySeries,
)
from latscope.report.schema import check_report, checks, component_tree, more, shown, ttft_leaves

_ASSETS = "latscope.report.assets"


def render_html(report: Report) -> str:
    """The whole page as a string; raises ReportError for a report it cannot render honestly."""
    check_report(report)
    from markupsafe import Markup

    charts = {name: Markup(plots.to_svg(spec)) if spec else None
              for name, spec in _chart_specs(report).items()}
    return _template().render(
        r=report, charts=charts, css=Markup(_asset("report.css")),
        findings=shown(report.findings), more=more(report.findings),
        checks=checks(report.findings),
        decompositions=[_decomposition_rows(d) for d in report.decompositions],
        load_kind=report.sweep.load_kind if report.sweep is not None else "concurrency",
        ranks=_cross_rank(report.cross_rank), window=_window(report))


def _window(report: Report) -> dict[str, Any] | None:
    """A passive run's window, its lines and tables (``report.window``'s words)."""
    from msgspec import UnsetType

    from latscope.report import window as win

    w = report.window
    if isinstance(w, UnsetType):
        return None
    head, body = win.latency_table(w.latency)
    return {"w": w, "traffic": win.traffic_line(w), "sent": win.sent_line(w),
            "scrape": win.scrape_line(w), "latency_head": head, "latency": body,
            "spikes": win.spike_lines(w)}


@dataclass(frozen=True, slots=True)
class RanksTable:
    """The page's rank table: its columns, one row of cells per rank, the sentences under it."""

    columns: tuple[str, ...]
    rows: list[list[str]]
    sentences: list[str]


@dataclass(frozen=True, slots=True)
class ComponentsTable:
    """One load's split as the page's table: (depth, is a TTFT leaf, component) in tree
    order."""

    label: str
    load: Number
    rows: list[tuple[int, bool, ComponentRow]]


def _cross_rank(section: CrossRank | None) -> RanksTable | None:
    from latscope.report.ranks import RANK_COLUMNS, cross_rank_sentences, rank_rows

    if section is None:
        return None
    return RanksTable(RANK_COLUMNS, rank_rows(section), cross_rank_sentences(section))


def _chart_specs(report: Report) -> dict[str, dict[str, Any] | None]:
    return {"sweep": plots.sweep_spec(report.sweep),
            "decomposition": plots.decomposition_spec(report.decompositions),
            "timeseries": plots.timeseries_spec(report.timeseries, _telemetry(report)),
            "trace": plots.trace_spec(report.trace),
            "experiments": plots.experiments_spec(report.experiments),
            "window": _window_spec(report)}


def _window_spec(report: Report) -> dict[str, Any] | None:
    from msgspec import UnsetType

    from latscope.report.windowplot import window_spec

    w = report.window
    return None if isinstance(w, UnsetType) else window_spec(w, _telemetry(report))


def _telemetry(report: Report) -> TelemetrySeries | None:
    tel = report.telemetry
    return tel if tel is not None and tel.status == "ok" else None


def _decomposition_rows(d: DecompositionView) -> ComponentsTable:
    leaves = {c.key for c in ttft_leaves(d)}
    return ComponentsTable(d.label, d.load, [(depth, c.key in leaves, c)
                                             for depth, c in component_tree(d.components)])


def _safe_href(ref: Any) -> str | None:
    """Only http(s) references become links: a ``javascript:`` URL from a log must not."""
    text = str(ref or "").strip()
    return text if text.lower().startswith(("https://", "http://")) else None


@lru_cache(maxsize=1)
def _template():
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ms=units.ms, pct=units.pct, arm_share=units.arm_share,
                       signed_pct=units.signed_pct,
                       interval=units.interval, num=units.number, value_unit=units.value_unit,
                       impact=describe, href=_safe_href)
    env.globals["load_label"] = units.load_label
    return env.from_string(_asset("report.html.j2"))


def _asset(name: str) -> str:
    return resources.files(_ASSETS).joinpath(name).read_text(encoding="utf-8")
