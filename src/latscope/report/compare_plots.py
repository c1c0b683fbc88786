"""The comparison report's charts, both sides overlaid (Vega-Lite specs, rendered to inline SVG
by ``report.plots.to_svg``): each latency's distribution, the server's running and waiting
requests over the run, a sweep's throughput and TTFT p99 against the load, and each figure's
change with its interval against the tolerance. Pure functions of the typed comparison; None
when there is nothing to draw."""

from __future__ import annotations

from typing import Any

from latscope.analysis.compare_model import Comparison, Curve

WIDTH = 620
_SIDE_COLOURS = {"domain": ["BASE", "NEW"], "range": ["#4c78a8", "#e45756"]}
_PANEL = {"width": WIDTH // 2 - 50, "height": 170}


def _side() -> dict[str, Any]:
    return {"field": "side", "type": "nominal", "title": None, "scale": _SIDE_COLOURS,
            "legend": {"orient": "top"}}


def _rows(curves: list[Curve]) -> list[dict[str, Any]]:
    return [{"x": x, "y": y, "side": c.side, "series": c.series}
            for c in curves for x, y in zip(c.x, c.y)]


def distribution_spec(c: Comparison) -> dict[str, Any] | None:
    """TTFT and E2E: the share of requests at or below each latency, BASE and NEW."""
    panels = []
    for series in ("TTFT", "E2E"):
        rows = _rows([k for k in c.curves if k.chart == "distribution" and k.series == series])
        if rows:
            panels.append({**_PANEL, "title": f"{series} distribution",
                           "data": {"values": rows}, "mark": {"type": "line"},
                           "encoding": {"x": {"field": "x", "type": "quantitative",
                                              "title": f"{series} (ms)", "scale": {"zero": False}},
                                        "y": {"field": "y", "type": "quantitative",
                                              "title": "share of requests at or below"},
                                        "color": _side()}})
    return {"title": "Latency distributions, BASE and NEW", "hconcat": panels} if panels \
        else None


def timeseries_spec(c: Comparison) -> dict[str, Any] | None:
    """The server's running and waiting requests over each side's run."""
    panels = []
    for series in ("running", "waiting"):
        rows = _rows([k for k in c.curves if k.chart == "timeseries" and k.series == series])
        if rows:
            panels.append({**_PANEL, "title": f"{series} (server)", "data": {"values": rows},
                           "mark": {"type": "line", "interpolate": "step-after"},
                           "encoding": {"x": {"field": "x", "type": "quantitative",
                                              "title": "time into the run (s)"},
                                        "y": {"field": "y", "type": "quantitative",
                                              "title": "requests"},
                                        "color": _side()}})
    return {"title": "The server over each run", "hconcat": panels} if panels else None


def sweep_spec(c: Comparison) -> dict[str, Any] | None:
    """Throughput and TTFT p99 against the load offered, BASE and NEW."""
    unit = "req/s offered" if c.sweep is not None and c.sweep.load_kind == "rate" \
        else "concurrency"
    panels = []
    for series in ("throughput (req/s)", "TTFT p99 (ms)"):
        rows = _rows([k for k in c.curves if k.chart == "sweep" and k.series == series])
        if rows:
            panels.append({**_PANEL, "title": f"{series.split(' (')[0]} against load",
                           "data": {"values": rows}, "mark": {"type": "line", "point": True},
                           "encoding": {"x": {"field": "x", "type": "quantitative",
                                              "title": unit},
                                        "y": {"field": "y", "type": "quantitative",
                                              "title": series},
                                        "color": _side()}})
    return {"title": "Curve against curve", "hconcat": panels} if panels else None


def changes_spec(c: Comparison) -> dict[str, Any] | None:
    """Each relative figure's NEW / BASE with its interval, on a log scale (a halving and a
    doubling equally far from 1), the tolerance band behind it."""
    rows = []
    for r in c.metrics:
        chosen = r.between if r.interval == "between-run" else r.within
        if not r.relative or r.change is None or not chosen or min(chosen) <= -1:
            continue
        rows.append({"figure": r.label, "ratio": 1 + r.change, "lo": 1 + chosen[0],
                     "hi": 1 + chosen[1], "tol_lo": 1 - r.tolerance, "tol_hi": 1 + r.tolerance,
                     "verdict": r.verdict})
    if not rows:
        return None
    y = {"field": "figure", "type": "nominal", "sort": None, "title": None}
    x = {"field": "ratio", "type": "quantitative", "scale": {"type": "log"},
         "title": "NEW / BASE (log scale; 1 = no change)"}
    return {
        "title": "Each figure's change and 95% interval (grey: the tolerance)",
        "width": WIDTH - 120, "height": 16 * len(rows),
        "data": {"values": rows},
        "layer": [
            {"mark": {"type": "bar", "color": "#eeeeee", "height": 14},
             "encoding": {"y": y, "x": {**x, "field": "tol_lo"}, "x2": {"field": "tol_hi"}}},
            {"mark": {"type": "rule", "strokeWidth": 2},
             "encoding": {"y": y, "x": {**x, "field": "lo"}, "x2": {"field": "hi"},
                          "color": _verdict_colour()}},
            {"mark": {"type": "point", "filled": True, "size": 40},
             "encoding": {"y": y, "x": x, "color": _verdict_colour()}},
        ],
    }


def _verdict_colour() -> dict[str, Any]:
    return {"field": "verdict", "type": "nominal", "title": None, "legend": {"orient": "top"},
            "scale": {"domain": ["regression", "improvement", "no change", "inconclusive"],
                      "range": ["#d62728", "#2ca02c", "#4c78a8", "#999999"]}}


def chart_specs(c: Comparison) -> dict[str, dict[str, Any] | None]:
    return {"changes": changes_spec(c), "distribution": distribution_spec(c),
            "timeseries": timeseries_spec(c), "sweep": sweep_spec(c)}
