"""report.json's typed model (latscope.report.model): a replayed diagnosis's report.json is the
model's dict key for key, converts back to the model with every type checked, and a report whose
field has the wrong type is refused by name."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import msgspec
import orjson
import pytest

from latscope.campaign.replay import replay
from latscope.report.model import Report, load_report, report_schema

MATRIX = Path(__file__).resolve().parents[2] / "data" / "gpu-matrix"


# kv-small: a sweep with its knee, the trace, three named loads; eager-proven: an A/B
@pytest.fixture(scope="module", params=["kv-small", "eager-proven"])
def replayed(request, tmp_path_factory) -> dict:
    into = tmp_path_factory.mktemp(request.param)
    with tarfile.open(MATRIX / f"{request.param}.tgz") as tar:
        tar.extractall(into, filter="data")
    replay(into / request.param, into / "out")
    return json.loads((into / "out" / "report.json").read_text())


def test_report_json_is_the_model_key_for_key_and_converts_back(replayed):
    replayed.pop("replayed_from")  # added by replay beside the model's fields
    # a load run's report has no passive window: the one field left out when unset
    assert list(replayed) == [f for f in Report.__struct_fields__ if f != "window"]
    model = load_report(replayed)
    assert model.sweep is not None and model.sweep.points and model.decompositions
    assert model.trace is not None or model.experiments
    assert model.to_dict() == replayed
    # the bytes too: every key in its place, every number as it was written (64, not 64.0)
    assert orjson.dumps(model.to_dict()) == orjson.dumps(replayed)


@pytest.mark.parametrize("name", sorted(p.stem for p in MATRIX.glob("*.tgz")))
def test_every_stored_report_json_loads_and_its_sections_come_back_as_written(name, tmp_path):
    # report.json files of schema_version 1 written by older versions (no cross_rank, no
    # telemetry, no verdict kind, no off_cpu_share): `latscope report DIR` still renders them
    with tarfile.open(MATRIX / f"{name}.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    stored = json.loads(next(tmp_path.glob("*/report.json")).read_text())
    typed = load_report(stored).to_dict()
    for key in ("findings", "stages", "client", "proposals", "experiments"):
        assert orjson.dumps(typed[key]) == orjson.dumps(stored[key]), key
    # an older healthy verdict had "healthy" before "finding_id": the same keys and values
    assert typed["verdict"] == stored["verdict"]


def test_a_field_of_the_wrong_type_is_refused_by_name(replayed):
    bad = {k: v for k, v in json.loads(json.dumps(replayed)).items() if k != "replayed_from"}
    bad["decompositions"][0]["components"][0]["share"] = "81%"
    with pytest.raises(msgspec.ValidationError, match=r"decompositions\[0\].components\[0\].share"):
        load_report(bad)


def test_the_schema_is_generated_from_the_model():
    schema = report_schema()
    report = schema["$defs"]["Report"]
    # every field but those older report.json files lack
    assert report["required"] == [f for f in Report.__struct_fields__
                                  if f not in ("cross_rank", "telemetry", "window")]
    assert schema["$defs"]["ComponentRow"]["properties"]["share"]["anyOf"] == [
        {"type": "number"}, {"type": "null"}]


def test_a_finding_in_the_report_has_the_keys_of_findings_schema_json():
    # findings.json's schema (hand-written, with its patterns) and the report's typed finding
    # are checked against each other: a key added to one and not the other fails here
    from latscope.report.model import EvidenceItem, FindingEntry

    path = Path(__file__).resolve().parents[3] / "src" / "latscope" / "findings" / "schema.json"
    defs = json.loads(path.read_text())["$defs"]
    assert defs["finding"]["required"] == list(FindingEntry.__struct_fields__)
    assert list(defs["finding"]["properties"]) == list(FindingEntry.__struct_fields__)
    assert sorted(defs["evidence"]["properties"]) == sorted(EvidenceItem.__struct_fields__)


def test_a_stored_report_renders_its_knee_confidence_as_the_word_it_is(tmp_path):
    # the sweep analysis' confidence is "high" or "low"; report.md printed it as a share
    # ("confidence n/a") and report.html left it out
    from latscope.report.html import render_html
    from latscope.report.markdown import render_markdown
    from latscope.report.write import typed_report

    with tarfile.open(MATRIX / "kv-small.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    report = typed_report(json.loads(next(tmp_path.glob("*/report.json")).read_text()))
    assert report.sweep is not None and report.sweep.knee is not None
    word = report.sweep.knee.confidence
    assert word in ("high", "low")
    assert f"({word} confidence)." in render_markdown(report)
    assert f"({word} confidence)." in render_html(report)


def test_a_stored_experiment_renders_each_arms_prefix_cache_hit_rate_not_n_a(tmp_path):
    # an A/B's prefix_cache_hit_rate holds one rate per run of each arm ({"A": [0.0, 0.0]});
    # report.md and report.html formatted the list as one share and printed "A n/a, B n/a"
    from latscope.report.html import render_html
    from latscope.report.markdown import render_markdown
    from latscope.report.write import typed_report

    with tarfile.open(MATRIX / "eager-proven.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    data = json.loads(next(tmp_path.glob("*/report.json")).read_text())
    assert data["experiments"][0]["prefix_cache_hit_rate"] == {"A": [0.0, 0.0], "B": [0.0, 0.0]}
    data["experiments"][0]["prefix_cache_hit_rate"] = {"A": [0.5, None, 0.3], "B": [0.75]}
    report = typed_report(data)
    assert "prefix-cache hit rate A 40%, B 75%" in " ".join(render_markdown(report).split())
    assert "prefix-cache hit rate A 40%, B 75%" in render_html(report)


@pytest.mark.parametrize("priority", [False, True])
def test_an_ab_of_either_producer_reads_back_with_every_key_in_its_place(priority):
    # campaign.experiment's A/B, and campaign.priority's (the same plus four keys), produced
    # typed: report.json's dict of it reads back (unknown keys forbidden) key for key
    from latscope.analysis.tune import paired_change
    from latscope.campaign.experiment import Experiment as Run
    from latscope.campaign.proposals import Proposal
    from latscope.campaign.servers import Change
    from latscope.report.model import Experiment, section

    proposal = Proposal("latency.queue", Change(), metric="short_ttft_mean_ms",
                        guard="long_e2e_mean_ms", more_guards=["e2e_mean_ms"])
    run = Run(proposal, 16, a_values=[900.0, 1000.0], b_values=[210.0, 250.0], arms=["A", "B"] * 2,
              guard_values={"A": [2000.0, 2100.0], "B": [4300.0, 4400.0]})
    run.result = paired_change(run.a_values, run.b_values, higher_better=False)
    produced = run.ab_result()
    if priority:
        produced.measured, produced.server_policy = True, {"A": "fcfs", "B": "priority"}
        produced.outcome, produced.proposal = "helped", "restart the server with ..."
    data = produced.to_dict()
    tail = ["measured", "server_policy", "outcome", "proposal"] if priority else []
    assert list(data)[-3 - len(tail):] == ["note", "guard", "guards", *tail]
    typed = section(data, Experiment)
    assert orjson.dumps(typed.to_dict()) == orjson.dumps(data)
