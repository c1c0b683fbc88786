"""report.html: one self-contained page rendered from a report.json dict.

No JavaScript and no external asset: the CSS is inlined, the charts are inline SVG (see
``latscope.report.plots``), and a Content-Security-Policy of ``default-src 'none'`` makes the
browser refuse any request the page might still try. All text goes through Jinja2's autoescape:
findings quote logs and servers, so a title may carry markup and must come out as text.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from latscope.analysis.tune import outcome
from latscope.findings.impact import describe
from latscope.report import plots, units
from latscope.report.schema import actionable, check_report, checks, component_tree, ttft_leaves

_ASSETS = "latscope.report.assets"


def render_html(report: dict[str, Any]) -> str:
    """The whole page as a string; raises ReportError for a report it cannot render honestly."""
    check_report(report)
    from markupsafe import Markup

    charts = {name: Markup(plots.to_svg(spec)) if spec else None
              for name, spec in _chart_specs(report).items()}
    return _template().render(
        r=report, charts=charts, css=Markup(_asset("report.css")),
        findings=actionable(report.get("findings") or []),
        checks=checks(report.get("findings") or []),
        decompositions=[_decomposition_rows(d) for d in report.get("decompositions") or []],
        load_kind=(report.get("sweep") or {}).get("load_kind", "concurrency"),
        ranks=_cross_rank(report.get("cross_rank")))


def _cross_rank(section: dict[str, Any] | None) -> dict[str, Any] | None:
    from latscope.report.ranks import RANK_COLUMNS, cross_rank_sentences, rank_rows

    if not section:
        return None
    return {"columns": RANK_COLUMNS, "rows": rank_rows(section),
            "sentences": cross_rank_sentences(section)}


def _chart_specs(report: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    return {"sweep": plots.sweep_spec(report.get("sweep")),
            "decomposition": plots.decomposition_spec(report.get("decompositions")),
            "timeseries": plots.timeseries_spec(report.get("timeseries"),
                                                 _telemetry(report)),
            "trace": plots.trace_spec(report.get("trace")),
            "experiments": plots.experiments_spec(report.get("experiments"))}


def _telemetry(report: dict[str, Any]) -> dict[str, Any] | None:
    tel = report.get("telemetry")
    return tel if isinstance(tel, dict) and tel.get("status") == "ok" else None


def _decomposition_rows(d: dict[str, Any]) -> dict[str, Any]:
    leaves = {c.get("key") for c in ttft_leaves(d)}
    return {"label": d.get("label"), "load": d.get("load"),
            "rows": [{"depth": depth, "leaf": c.get("key") in leaves, **c}
                     for depth, c in component_tree(d.get("components") or [])]}


def _safe_href(ref: Any) -> str | None:
    """Only http(s) references become links: a ``javascript:`` URL from a log must not."""
    text = str(ref or "").strip()
    return text if text.lower().startswith(("https://", "http://")) else None


@lru_cache(maxsize=1)
def _template():
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ms=units.ms, pct=units.pct, signed_pct=units.signed_pct,
                       interval=units.interval, num=units.number, value_unit=units.value_unit,
                       impact=describe, href=_safe_href)
    env.globals["load_label"] = units.load_label
    env.globals["outcome"] = outcome
    return env.from_string(_asset("report.html.j2"))


def _asset(name: str) -> str:
    return resources.files(_ASSETS).joinpath(name).read_text(encoding="utf-8")
