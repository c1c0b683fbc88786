"""A comparison as one self-contained HTML page (``report.html`` of a compare run): the charts
with both sides overlaid as inline SVG (``report.compare_plots``), the tables, the findings.
No script, no external asset, a Content-Security-Policy of ``default-src 'none'``, and every
text autoescaped (paths and titles may carry markup), as ``report.html`` does."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from latscope.analysis.compare_model import Comparison
from latscope.report import compare as words
from latscope.report import units
from latscope.report.compare_plots import chart_specs

_ASSETS = "latscope.report.assets"


def render_html(c: Comparison) -> str:
    from markupsafe import Markup

    from latscope.report.plots import to_svg

    charts = {name: Markup(to_svg(spec)) if spec else None
              for name, spec in chart_specs(c).items()}
    return _template().render(c=c, charts=charts, css=Markup(_asset("report.css")),
                              title=words.title(c), note=words.interval_note(c),
                              status=words.status_line(c).split(" (exit")[0])


@lru_cache(maxsize=1)
def _template() -> Any:
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ms=units.ms, pct=units.pct, num=units.number)
    env.globals.update(value=words.value, change=words.change, interval=words.interval,
                       verdict=words.verdict)
    return env.from_string(_asset("compare.html.j2"))


def _asset(name: str) -> str:
    return resources.files(_ASSETS).joinpath(name).read_text(encoding="utf-8")
