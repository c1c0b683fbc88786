"""A bug in ranking is never silenced: diagnose records the stage that broke with its cause,
writes every stage and finding gathered, and then fails (it used to wrap the ranking in
``suppress(Exception)`` and give a report without a verdict, #19)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: fakeserver
from fakeserver import FakeServer  # noqa: E402

pytestmark = pytest.mark.slow


def _diagnose_fails(tmp_path: Path, match: str) -> None:
    """A short diagnose of a fake server, which must fail with ``match``."""
    from latscope.campaign.diagnose import DiagnoseFailed, DiagnoseOptions, diagnose

    with FakeServer(ttft_ms=5, itl_ms=1) as server:
        opts = DiagnoseOptions(url=server.url, loads=(1,), budget_s=30, prove=False,
                               input_len="16", output_len="4", output_dir=str(tmp_path / "run"))
        with pytest.raises(DiagnoseFailed, match=match):
            diagnose(opts)


def test_a_bug_in_ranking_fails_the_run_after_writing_what_was_gathered(tmp_path, monkeypatch):
    import latscope.campaign.diagnose as diagnose_module

    calls = []

    def broken(state):
        calls.append(1)
        raise ZeroDivisionError("a planted bug")

    monkeypatch.setattr(diagnose_module, "conclude", broken)
    _diagnose_fails(tmp_path, "could not be ranked: ZeroDivisionError")
    assert len(calls) == 1  # the first ranking broke: no proof ran on it, none re-ran it
    run = tmp_path / "run"
    stages = json.loads((run / "stages.json").read_text())
    assert [s["name"] for s in stages][:3] == ["doctor", "net", "sweep"]
    report = json.loads((run / "report.json").read_text())
    [conclude] = [s for s in report["stages"] if s["name"] == "conclude"]
    assert conclude["status"] == "failed" and "a planted bug" in conclude["note"]
    assert report["verdict"]["text"].startswith("No verdict: the findings could not be ranked")
    assert (run / "report.html").is_file() and (run / "report.md").is_file()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"].startswith("failed: the findings could not be ranked")
    assert (run / "sweep.json").is_file()  # what the sweep measured is kept


def test_a_section_the_report_model_refuses_fails_the_run_with_every_section_kept(
        tmp_path, monkeypatch, capsys):
    """A section that does not fit the typed report (a bug: a producer that filled a typed
    result with a value of another type, which a Struct does not check when it is made) must
    not cost the run its report: report.json holds every section as its producer gave it, and
    the cause."""
    import latscope.campaign.diagnose as diagnose_module
    from latscope.results import Proposal

    real_conclude = diagnose_module.conclude

    def conclude_with_a_wrong_type(state):
        real_conclude(state)
        state.proposals.append(Proposal(finding_id="x", change="--y", why="z", note="n",
                                        command=["not", "a", "string"]))  # type: ignore[arg-type]

    monkeypatch.setattr(diagnose_module, "conclude", conclude_with_a_wrong_type)
    _diagnose_fails(tmp_path, "does not fit the report model")
    run = tmp_path / "run"
    report = json.loads((run / "report.json").read_text())
    assert "proposals[0].command" in report["report_error"]
    assert report["proposals"][-1]["command"] == ["not", "a", "string"]  # kept as produced
    assert report["verdict"]["text"] and report["findings"]  # the ranking stands
    [stage] = [s for s in report["stages"] if s["name"] == "report"]
    assert stage["status"] == "failed"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"].startswith("failed: report.json does not fit the report model")
    assert (run / "findings.json").is_file() and (run / "sweep.json").is_file()
    from latscope.cli.main import main

    assert main(["report", str(run)]) == 2  # refused in one line that says why
    assert "could not be rendered: report.json does not fit" in capsys.readouterr().err
