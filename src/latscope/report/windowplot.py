"""The chart of a passive window (report.html): the traffic, the batch and queue, TTFT and the
queue's share of it, the KV cache, on one time axis, each spike shaded in every panel. A
Vega-Lite spec like ``report.plots``'; the GPUs' telemetry joins under it when it was read."""

from __future__ import annotations

from typing import Any

from latscope.report.model import WindowSection
from latscope.report.plots import WIDTH, _num, telemetry_panels
from latscope.telemetry.series import TelemetrySeries

# (field of WindowPoint, legend label, panel, scale)
_SERIES = (
    ("arrivals_rps", "arrived /s", "requests / s", 1.0),
    ("finished_rps", "finished /s", "requests / s", 1.0),
    ("running", "running", "batch and queue", 1.0),
    ("waiting", "waiting", "batch and queue", 1.0),
    ("ttft_mean_ms", "TTFT mean", "server TTFT (ms)", 1.0),
    ("ttft_p50_ms", "TTFT p50 (in its bucket)", "server TTFT (ms)", 1.0),
    ("ttft_p99_ms", "TTFT p99 (in its bucket)", "server TTFT (ms)", 1.0),
    ("queue_share", "queue share of TTFT", "queue share (%)", 100.0),
    ("kv_usage", "KV cache used", "KV cache (%)", 100.0),
)
_PERCENT = ("queue share (%)", "KV cache (%)")


def window_spec(w: WindowSection | None, telemetry: TelemetrySeries | None = None
                ) -> dict[str, Any] | None:
    if w is None or not w.points:
        return None
    panels: dict[str, list[dict[str, Any]]] = {}
    for key, label, panel, scale in _SERIES:
        for p in w.points:
            value = getattr(p, key)
            if _num(value):
                panels.setdefault(panel, []).append({"t": p.t_s, "v": value * scale,
                                                     "series": label})
    x_dom = [0.0, max(p.t_s for p in w.points)]
    spikes = [{"start": s.start_s, "end": s.end_s} for s in w.spikes]
    charts = [_panel(rows, title, x_dom, spikes) for title, rows in panels.items()]
    charts += telemetry_panels(telemetry, x_dom)
    if not charts:
        return None
    title = (f"{w.label[0].upper()}{w.label[1:]}, one point per scrape interval"
             + (" (spikes shaded)" if spikes else ""))
    return {"title": title, "vconcat": charts, "resolve": {"scale": {"color": "independent"}}}


def _panel(rows: list[dict[str, Any]], title: str, x_dom: list[float],
           spikes: list[dict[str, Any]]) -> dict[str, Any]:
    y: dict[str, Any] = {"field": "v", "type": "quantitative", "title": title}
    if title in _PERCENT:
        y["scale"] = {"domain": [0, 100]}
    x = {"field": "t", "type": "quantitative", "title": "seconds into the window",
         "scale": {"domain": x_dom}}
    line = {"data": {"values": rows}, "mark": {"type": "line", "interpolate": "step-before",
                                                "point": len(rows) < 40},
            "encoding": {"x": x, "y": y,
                         "color": {"field": "series", "type": "nominal", "title": None,
                                   "legend": {"orient": "top"}}}}
    layers: list[dict[str, Any]] = [line]
    if spikes:
        layers.insert(0, {"data": {"values": spikes},
                          "mark": {"type": "rect", "color": "#e45756", "opacity": 0.15},
                          "encoding": {"x": {"field": "start", "type": "quantitative",
                                             "scale": {"domain": x_dom}},
                                       "x2": {"field": "end"}}})
    return {"width": WIDTH, "height": 110, "layer": layers}
