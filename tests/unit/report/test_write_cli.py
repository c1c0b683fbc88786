"""write_reports and `latscope report RUN_DIR` on a folder holding a report.json alone (a report
copied out of its run): atomic files, refusals in one line, exit 2 (tests/unit/report/
test_rerender.py has every kind of run directory)."""

from __future__ import annotations

import orjson
import pytest

from latscope.cli.main import main
from latscope.report.schema import ReportError
from latscope.report.write import write_reports
from report_samples import full_report


def test_writes_three_reports_and_json_round_trips(tmp_path):
    paths = write_reports(tmp_path / "run", full_report())
    assert {p.name for p in paths.values()} == {"report.json", "report.html", "report.md"}
    assert orjson.loads(paths["json"].read_bytes()) == full_report()
    assert paths["html"].read_text().startswith("<!DOCTYPE html>")
    assert paths["md"].read_text().startswith("# latscope diagnose")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "report.html", "report.json", "report.md"]  # no temporary file left behind


def test_refused_report_keeps_its_json(tmp_path):
    r = full_report()
    r["findings"][0]["impact"]["share"] = 1.5
    with pytest.raises(ReportError, match="above 100%"):
        write_reports(tmp_path, r)
    assert orjson.loads((tmp_path / "report.json").read_bytes()) == r  # the results survive
    assert not (tmp_path / "report.html").exists()


def test_unknown_version_writes_nothing(tmp_path):
    r = full_report()
    r["schema_version"] = 99
    with pytest.raises(ReportError, match="schema_version 99"):
        write_reports(tmp_path, r)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_cli_report_regenerates_html_and_md(tmp_path, capsys):
    write_reports(tmp_path, full_report())
    (tmp_path / "report.html").unlink()
    (tmp_path / "report.md").write_text("stale")
    assert main(["report", str(tmp_path)]) == 0
    assert "<svg" in (tmp_path / "report.html").read_text()
    assert (tmp_path / "report.md").read_text().startswith("# latscope diagnose")
    out = capsys.readouterr().out
    assert "report.html" in out and "KiB" in out


@pytest.mark.parametrize("content, message", [
    (b'{"schema_version": 7, "verdict": {"text": "x"}}',
     "report.json: schema_version 7 is newer than this latscope reads (1)"),
    (b'{"schema_version": 1, ', "not valid JSON"),
    (None, "not a latscope run directory (no manifest.json)"),
])
def test_cli_report_refuses_in_one_line(tmp_path, capsys, content, message):
    if content is not None:
        (tmp_path / "report.json").write_bytes(content)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "report.html").exists()


def test_cli_report_missing_run_dir(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "nope: not a directory" in capsys.readouterr().err


def test_cli_report_refuses_a_report_json_that_does_not_fit_the_model_naming_the_field(
        tmp_path, capsys):
    # an older or corrupt report.json: one line naming the field, not a traceback
    r = full_report()
    r["sweep"]["points"][2]["ttft_p50_ms"] = "fast"
    (tmp_path / "report.json").write_bytes(orjson.dumps(r))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "does not fit" in err and "$.sweep.points[2].ttft_p50_ms" in err
    assert not (tmp_path / "report.html").exists()
