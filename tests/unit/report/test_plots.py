"""Vega-Lite specs built from the report dict, and what the SVG renderer may and may not do."""

from __future__ import annotations

import pytest

from latscope.report import plots
from latscope.report.schema import component_tree, ttft_leaves
from report_samples import full_report, typed


def _layers(spec):
    """Every single-view spec inside a (h/v)concat or layer spec."""
    for key in ("hconcat", "vconcat", "layer"):
        for sub in spec.get(key, []):
            yield from _layers(sub)
    if "mark" in spec:
        yield spec


def test_sweep_marks_knee_and_recommended_at_their_loads():
    spec = plots.sweep_spec(typed(full_report()).sweep)
    rules = [s for s in _layers(spec) if s["mark"].get("type") == "rule"]
    assert rules, "knee/recommended rules missing"
    marks = {m["label"]: m for m in rules[0]["data"]["values"]}
    assert marks["knee c=16"]["load"] == 16 and marks["recommended c=14"]["load"] == 14
    # c=14 lies between the measured c=8 and c=16 points: throughput interpolated between them
    assert marks["recommended c=14"]["rps"] == pytest.approx(4.18)
    assert marks["recommended c=14"]["ttft"] == pytest.approx(315 + 0.75 * (663.4 - 315),
                                                              abs=1)


def test_at_load_interpolates_and_refuses_outside():
    from types import SimpleNamespace

    points = [SimpleNamespace(load=2, v=10.0), SimpleNamespace(load=4, v=20.0)]
    assert plots._at_load(points, 3, "v") == 15.0
    assert plots._at_load(points, 4, "v") == 20.0
    assert plots._at_load(points, 8, "v") is None  # never extrapolated


def test_decomposition_bars_use_leaves_only_and_clamp_noise():
    r = full_report()
    dec = typed(r).decompositions[0]
    assert "ttft.server" not in {c.key for c in ttft_leaves(dec)}
    assert {c.key for c in ttft_leaves(dec)} == {
        "ttft.send_lag", "ttft.network", "ttft.server.queue", "ttft.server.prefill",
        "ttft.server.other"}
    r["decompositions"][0]["components"][2]["mean_ms"] = -0.4  # a difference of means < 0: noise
    rows = plots.decomposition_spec(typed(r).decompositions)["data"]["values"]
    net = [x for x in rows if x["part"] == "network + HTTP frontend + client"]
    assert [x["ms"] for x in net] == [0.0, 3.0]


def test_timeseries_panels_share_one_time_axis():
    spec = plots.timeseries_spec(typed(full_report()).timeseries)
    domains = {tuple(p["encoding"]["x"]["scale"]["domain"]) for p in spec["vconcat"]}
    assert domains == {(0, 12)} and len(spec["vconcat"]) == 3
    kv = spec["vconcat"][1]["data"]["values"]
    assert max(x["v"] for x in kv) == pytest.approx(6.0)  # in percent


@pytest.mark.parametrize("fn", [plots.sweep_spec, plots.decomposition_spec,
                                plots.timeseries_spec, plots.trace_spec,
                                plots.experiments_spec])
def test_nothing_to_draw_gives_none(fn):
    assert fn([] if fn is plots.decomposition_spec else None) is None


def test_experiments_forest_has_interval_and_verdict():
    spec = plots.experiments_spec(typed(full_report()).experiments)
    forest = spec["vconcat"][0]["layer"][1]["data"]["values"]
    assert [(f["lo"], f["hi"], f["verdict"]) for f in forest] == [
        (-90.1, -86.0, "helped"), (-4.2, 7.5, "did not measurably help")]


def test_renderer_fetches_nothing():
    spec = {"data": {"url": "http://127.0.0.1:9/data.csv"}, "mark": "point"}
    with pytest.raises(Exception, match="(?i)url|allowed|access"):
        plots.to_svg(spec)


def test_component_tree_depths_and_cycles():
    from latscope.report.model import ComponentRow

    comps = typed(full_report()).decompositions[0].components
    depth = {c.key: d for d, c in component_tree(comps)}
    assert depth["ttft"] == 0 and depth["ttft.server"] == 1 and depth["ttft.server.queue"] == 2
    cyclic = [ComponentRow(key, key, parent, None, None, "", "")
              for key, parent in (("a", "b"), ("b", "a"), ("c", None))]
    assert [c.key for _, c in component_tree(cyclic)] == ["c"]
