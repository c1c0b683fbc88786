"""report.json's typed model (latscope.report.model): a replayed diagnosis's report.json is the
model's dict key for key, converts back to the model with every type checked, and a report whose
field has the wrong type is refused by name."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import msgspec
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
    assert list(replayed) == list(Report.__struct_fields__)
    model = load_report(replayed)
    assert model.sweep is not None and model.sweep.points and model.decompositions
    assert model.trace is not None or model.experiments
    assert model.to_dict() == replayed


def test_a_field_of_the_wrong_type_is_refused_by_name(replayed):
    bad = {k: v for k, v in json.loads(json.dumps(replayed)).items() if k != "replayed_from"}
    bad["decompositions"][0]["components"][0]["share"] = "81%"
    with pytest.raises(msgspec.ValidationError, match=r"decompositions\[0\].components\[0\].share"):
        load_report(bad)


def test_the_schema_is_generated_from_the_model():
    schema = report_schema()
    report = schema["$defs"]["Report"]
    assert report["required"] == list(Report.__struct_fields__)
    assert schema["$defs"]["ComponentRow"]["properties"]["share"]["anyOf"] == [
        {"type": "number"}, {"type": "null"}]
