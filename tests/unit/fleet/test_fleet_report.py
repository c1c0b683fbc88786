"""The fleet report of a real recorded window, as every renderer prints it: the terminal in 80
columns without a tty, report.md's fleet table, a self-contained report.html with one line per
replica, and `latscope show` / `latscope report` reading the run directory back."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from latscope.campaign.fleet import PrometheusOptions, diagnose_prometheus
from latscope.report.fleet import render_fleet_text, typed_fleet_report
from latscope.report.fleethtml import fleet_spec

SLOW = "127.0.0.1:37663"
pytestmark = pytest.mark.slow  # one diagnosis rendered to report.html (vl-convert: 1-3 s)


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    from prom_replay import Replayer, load_scenario, serve, spec_of

    doc = load_scenario("slow_replica")
    server, url = serve(Replayer(doc["exchanges"]))
    spec = spec_of(doc)
    out = tmp_path_factory.mktemp("fleet") / "run"
    try:
        report = diagnose_prometheus(PrometheusOptions(
            url, spec.start, spec.end, None, spec.selector, spec.replica_labels,
            output_dir=str(out), argv=["diagnose", "--prometheus", url]), lambda line: None)
    finally:
        server.shutdown()
    return out, report


def test_the_terminal_report_fits_80_columns_and_names_the_slow_replica(fleet_run):
    _, report = fleet_run
    text = render_fleet_text(typed_fleet_report(report))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "\x1b[" not in text  # no colour codes: log files and pipes read it as it is
    verdict = next(line for line in text.splitlines() if line.startswith("VERDICT"))
    assert verdict.startswith("VERDICT  At the window 2026-12-07 01:21:22-01:22:21")
    row = next(line for line in text.splitlines() if line.startswith(SLOW))
    assert re.search(r"\b97%", row) and "11 s" in row


def test_the_markdown_and_html_hold_the_fleet_table_and_one_line_per_replica(fleet_run):
    out, report = fleet_run
    md = (out / "report.md").read_text()
    assert "| replica | status | requests |" in md
    assert md.count("| 127.0.0.1:") == 3 + 36  # the fleet table and Prometheus beside latscope
    html = (out / "report.html").read_text()
    assert html.count("<svg") == 1 and "<script" not in html
    assert not re.search(r'(src|href)="https?://', html)  # nothing to fetch
    spec = fleet_spec(typed_fleet_report(report).timeseries)
    replicas = {row["replica"] for panel in spec["vconcat"] for row in panel["data"]["values"]}
    assert replicas == {SLOW, "127.0.0.1:40415", "127.0.0.1:59899"}


def test_show_and_report_read_the_fleet_run_back(fleet_run):
    out, report = fleet_run
    shown = subprocess.run([sys.executable, "-m", "latscope", "show", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "fleet run, status ok" in shown.stdout and f"replica {SLOW} has 14.0x" in shown.stdout
    (out / "report.md").unlink()
    again = subprocess.run([sys.executable, "-m", "latscope", "report", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert (out / "report.md").is_file()
    assert json.loads((out / "report.json").read_text())["verdict"] == report["verdict"]


def test_report_renders_the_fleet_run_in_every_format(fleet_run, capsys, tmp_path):
    from latscope.cli.main import main

    out, report = fleet_run
    pages = {}
    for fmt in ("text", "md", "json", "html"):
        capsys.readouterr()
        assert main(["report", str(out), "--format", fmt, "-o", str(tmp_path / fmt)]) == 0
        assert capsys.readouterr().out == ""
        pages[fmt] = (tmp_path / fmt).read_text()
    assert f"replica {SLOW} has 14.0x" in pages["text"]
    assert pages["md"] == (out / "report.md").read_text()  # what the run wrote, again
    assert json.loads(pages["json"]) == report  # its typed model gives back every key
    assert pages["html"].startswith("<!DOCTYPE html>") and "<script" not in pages["html"]


def test_replay_re_derives_the_run_without_prometheus(fleet_run, tmp_path):
    out, report = fleet_run  # the recorded Prometheus is gone: only the run directory is read
    done = subprocess.run([sys.executable, "-m", "latscope", "diagnose", "--replay", str(out),
                           "-o", str(tmp_path / "replay"), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["verdict"] == report["verdict"]
    assert again["promql"] == report["promql"]

    def rows(r):  # the same figures; only the evidence's source says "(replayed)"
        return [({k: v for k, v in row.items() if k != "findings"},
                 [(f["id"], f["title"]) for f in row["findings"]]) for row in r["replicas"]]

    assert rows(again) == rows(report)
    manifest = json.loads((tmp_path / "replay" / "manifest.json").read_text())
    assert manifest["kind"] == "fleet" and manifest["replayed_from"] == str(out)
