"""report.html of a fleet diagnosis: one self-contained page (no script, no external asset,
``default-src 'none'``), its chart the fleet over time with one line per replica (Vega-Lite
rendered to inline SVG, as every latscope chart)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from latscope.findings.impact import describe
from latscope.report import units
from latscope.report.fleetmodel import FleetReport, ReplicaSeries

_ASSETS = "latscope.report.assets"
WIDTH = 620
# (series field, panel title): one panel a figure, one line a replica in each
PANELS = (("ttft_mean_ms", "TTFT mean of the interval (ms)"),
          ("queue_mean_ms", "queue time mean (ms)"),
          ("requests_per_s", "requests finished / s"),
          ("waiting", "requests waiting"))


def fleet_spec(series: list[ReplicaSeries]) -> dict[str, Any] | None:
    """The Vega-Lite spec: a panel per figure, a colour per replica, on one time axis."""
    t = [x for s in series for x in s.t_s]
    if len(t) < 2:
        return None
    panels = []
    for key, title in PANELS:
        rows = [{"t": when, "v": v, "replica": s.name} for s in series
                for when, v in zip(s.t_s, getattr(s, key)) if v is not None]
        if not rows:
            continue
        panels.append({
            "width": WIDTH, "height": 120, "title": title, "data": {"values": rows},
            "mark": {"type": "line", "interpolate": "step-before", "point": {"size": 12}},
            "encoding": {"x": {"field": "t", "type": "quantitative",
                               "title": "time in the window (s)",
                               "scale": {"domain": [min(t), max(t)]}},
                         "y": {"field": "v", "type": "quantitative", "title": None},
                         "color": {"field": "replica", "type": "nominal", "title": "replica",
                                   "legend": {"orient": "top"}}}})
    return {"vconcat": panels} if panels else None


def render_fleet_html(r: FleetReport) -> str:
    from markupsafe import Markup

    from latscope.report.fleetwords import (
        promql_summary,
        router_sentence,
        source_line,
        window_line,
    )
    from latscope.report.plots import to_svg

    spec = fleet_spec(r.timeseries)
    return _template().render(
        r=r, css=Markup(_asset("report.css")), chart=Markup(to_svg(spec)) if spec else None,
        source=source_line(r), window=window_line(r), promql_summary=promql_summary(r.promql),
        router=router_sentence(r) if r.router is not None else "")


@lru_cache(maxsize=1)
def _template():
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ms=units.ms, pct=units.pct, num=units.number, impact=describe)
    return env.from_string(_asset("fleet.html.j2"))


def _asset(name: str) -> str:
    return resources.files(_ASSETS).joinpath(name).read_text(encoding="utf-8")
