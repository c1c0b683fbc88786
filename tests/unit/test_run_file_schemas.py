"""Every JSON file a run directory holds fits the JSON Schema generated from its model
(``latscope.report.files``): the real files of the recorded GPU runs (tests/data) and the files
latscope's verbs write here; a file that breaks its model is refused, and the typed readers give
the recorded files back key for key."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import jsonschema
import msgspec
import pytest

from fakeserver import FakeServer
from latscope.cli.main import main
from latscope.report.files import FILES, run_file_schema

DATA = Path(__file__).resolve().parents[1] / "data"
# the run directory files with a generated schema, by the name they have on disk (telemetry.json
# under telemetry/, cpu.json under host/); findings.json's hand-written schema has its own tests
# (findings/test_schema)
NAMES = tuple(f for f in FILES if f != "findings.json")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """Every recorded run directory under tests/data, extracted."""
    out = tmp_path_factory.mktemp("recorded")
    for tgz in sorted(DATA.glob("*/*.tgz")):
        with tarfile.open(tgz) as tar:
            tar.extractall(out / tgz.parent.name, filter="data")
    return out


def _kind(path: Path) -> str:
    """The verb that wrote ``path``: its run directory's manifest's, or its parent's."""
    for folder in path.parents:
        manifest = folder / "manifest.json"
        if manifest.is_file():
            return str(json.loads(manifest.read_text()).get("kind", ""))
    return ""


def _validate_all(root: Path) -> dict[str, int]:
    """Validate every run file under ``root``; how many of each were checked."""
    checked: dict[str, int] = {}
    validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
    for name in NAMES:
        for path in sorted(root.rglob(name)):
            kind = _kind(path) if name == "trace.json" else ""
            key = (name, kind)
            if key not in validators:
                schema = run_file_schema(name, kind)
                validators[key] = jsonschema.Draft202012Validator(schema)
            validators[key].validate(json.loads(path.read_text()))
            checked[name] = checked.get(name, 0) + 1
    return checked


def test_the_recorded_gpu_runs_fit_every_schema(recorded):
    checked = _validate_all(recorded)
    # 17 diagnose runs on an H200/H100, each with its sweep's steps
    assert checked["manifest.json"] > 100 and checked["summary.json"] > 80
    assert checked["decomposition.json"] > 80 and checked["sweep.json"] == 17
    assert checked["telemetry.json"] > 30 and checked["trace.json"] >= 4
    assert checked["cpu.json"] > 30
    # and the passive windows recorded on the CPU vLLM and an H200 (diagnose --passive:
    # report.json alike)
    passive = len(list(DATA.glob("passive*/*.tgz")))
    assert passive >= 8 and checked["report.json"] == 17 + passive


def test_the_files_the_verbs_write_here_fit_their_schema(tmp_path, capsys):
    multi = DATA / "multi-rank"
    ranks = [str(multi / f"hta_sampled_rank-{i}.json.gz") for i in (0, 1)]
    assert main(["trace", *ranks, "-o", str(tmp_path / "trace"), "--quiet"]) == 0
    assert main(["trace", "--compare", *ranks, "-o", str(tmp_path / "compare"), "--quiet"]) == 0
    for i, rank in enumerate(ranks):
        assert main(["trace", rank, "-o", str(tmp_path / f"rank{i}"), "--quiet"]) == 0
    # two profiles: the gate cannot decide (2), the diff is written all the same
    assert main(["compare", str(tmp_path / "rank0"), str(tmp_path / "rank1"),
                 "-o", str(tmp_path / "cmp")]) == 2
    with FakeServer(ttft_ms=2, itl_ms=1) as srv:
        common = ["--url", srv.url, "--model", "fake-model", "--output-len", "4"]
        assert main(["bench", *common, "-c", "2", "-n", "6", "--no-progress",
                     "--scrape-interval", "0", "--output-dir", str(tmp_path / "bench")]) == 0
        assert main(["sweep", *common, "--concurrency", "1,2", "-n", "6",
                     "-o", str(tmp_path / "sweep")]) == 0
    capsys.readouterr()
    checked = _validate_all(tmp_path)
    assert checked["trace.json"] == 4 and checked["sweep.json"] == 1
    assert checked["compare.json"] == 1
    diff = json.loads((tmp_path / "cmp" / "compare.json").read_text())["trace"]
    assert {r["key"] for r in diff["breakdown"]} >= {"busy", "idle"}
    assert all("a_ms" in r and "a_ns" not in r for r in diff["breakdown"])
    assert checked["summary.json"] == 3 and checked["manifest.json"] >= 5
    trace = json.loads((tmp_path / "trace" / "trace.json").read_text())
    assert trace["schema_version"] == 1 and trace["cross_rank"]["collectives"]["matched"] > 0
    summary = json.loads((tmp_path / "bench" / "summary.json").read_text())
    assert next(iter(summary)) == "schema_version"


@pytest.mark.parametrize("name, kind, path, bad", [
    ("trace.json", "trace", ("traces", 0, "devices", 0, "breakdown", "idle_share"), "most"),
    ("sweep.json", "", ("steps", 0, "load"), "one"),
    ("summary.json", "", ("requests", "total"), None),
    ("telemetry.json", "", ("status",), 7),
])
def test_a_file_that_breaks_its_model_is_refused(name, kind, path, bad):
    doc = {"trace.json": {"traces": [{"devices": [{"breakdown": {}}]}]},
           "sweep.json": {"steps": [{"load": 1, "metrics": {}}]},
           "summary.json": {"requests": {"total": 1}},
           "telemetry.json": {"status": "ok"}}[name]
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, run_file_schema(name, kind))


def test_the_typed_readers_give_the_recorded_files_back_key_for_key(recorded):
    # what a model does not hold would be lost on the way through it
    from latscope.analysis.sweepfile import SweepFile
    from latscope.results import to_json_builtins
    from latscope.telemetry.files import TelemetrySummary
    from latscope.trace.files import StoredTrace, as_json, from_json

    pairs = [("sweep.json", lambda d: to_json_builtins(msgspec.convert(d, SweepFile))),
             ("trace.json", lambda d: as_json(from_json(d, StoredTrace))),
             ("telemetry.json", lambda d: msgspec.json.decode(msgspec.json.encode(
                 msgspec.convert(d, TelemetrySummary, strict=False))))]
    for name, again in pairs:
        paths = sorted(recorded.rglob(name))
        assert paths
        for path in paths:
            data = json.loads(path.read_text())
            back = again(data)
            back.pop("schema_version", None)
            assert back == data, path
