"""The GPU series in the report: panels under the server's on the same time axis (report.html),
a table in report.md, the one line when there was none."""

from __future__ import annotations

import sys
from pathlib import Path

from latscope.report import plots
from latscope.report.html import render_html
from latscope.report.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: report_samples
from report_samples import full_report, typed  # noqa: E402

TELEMETRY = {"status": "ok", "source": "NVML (nvidia-ml-py 13.615.71) (telemetry/samples.jsonl)",
             "gpus": [0, 1],
             "t_s": [0.1, 0.1, 6.1, 6.1, 13.1, 13.1], "gpu": [0, 1, 0, 1, 0, 1],
             "util_pct": [3, 2, 97, 96, 99, 98],
             "sm_clock_mhz": [345, 345, 1755, 1740, 1700, 1710],
             "sm_clock_max_mhz": [1980] * 6, "power_w": [80, 81, 690, 688, 699, 700],
             "power_limit_w": [700] * 6, "mem_used_pct": [91] * 6,
             "temp_c": [35, 36, 61, 60, 66, 65]}


def _report(telemetry):
    return {**full_report(), "telemetry": telemetry}


def test_gpu_panels_stack_under_the_server_series_on_one_axis():
    r = _report(TELEMETRY)
    spec = plots.timeseries_spec(typed(r).timeseries, typed(r).telemetry)
    panels = spec["vconcat"]
    titles = [p["encoding"]["y"]["title"] for p in panels]
    assert titles[-4:] == ["GPU busy (%)", "SM clock (MHz), max dashed",
                           "power (W), limit dashed", "GPU memory used (%)"]
    domains = {tuple(p["encoding"]["x"]["scale"]["domain"]) for p in panels}
    assert domains == {(0, 13.1)}  # the server's 0..12 s and the GPUs' last sample
    power = panels[-2]["data"]["values"]
    assert {"t": 0.1, "v": 700, "series": "GPU1", "kind": "ceiling"} in power
    assert plots.timeseries_spec(typed(r).timeseries) is not None  # without telemetry as before


def test_html_draws_the_gpu_series_and_names_their_source():
    html = render_html(typed(_report(TELEMETRY)))
    assert "GPU busy (%)" in html and "power (W), limit dashed" in html
    assert "GPU series: NVML (nvidia-ml-py 13.615.71)" in html


def test_markdown_and_html_say_when_there_was_no_gpu_telemetry():
    none = {"status": "unavailable",
            "why": "no NVIDIA driver, no amdsmi, amd-smi or rocm-smi"}
    md = render_markdown(typed(_report(none)))
    assert "## GPU over time\n\nNo GPU telemetry: no NVIDIA driver, no amdsmi" in md
    assert "No GPU telemetry: no NVIDIA driver, no amdsmi" in render_html(typed(_report(none)))
    table = render_markdown(typed(_report(TELEMETRY)))
    assert "| GPU1 busy (%)" in table and all(len(x) <= 100 for x in table.splitlines())
