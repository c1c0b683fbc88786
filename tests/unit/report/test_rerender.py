"""`latscope report DIR --format text|md|html|json` over every kind of run directory, from disk
alone: the recorded GPU diagnose and passive runs (tests/data), and bench, sweep, tune, trace,
compare, doctor and logs runs made here (fleet: tests/unit/fleet/test_fleet_report.py). `show`
is its text; a format a kind has no renderer for, a folder latscope did not write, a corrupt,
missing or newer main document: one line, exit 2, nothing written."""

from __future__ import annotations

import json
import math
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from compare_samples import write_run
from latscope.cli.main import main
from latscope.report.rerender import KINDS, formats_of

DATA = Path(__file__).resolve().parents[2] / "data"
DOCTOR_CAPTURE = Path(__file__).resolve().parents[1] / "env" / "data" / "h200_collect.tar.gz"


def _extract(tgz: Path, into: Path) -> Path:
    with tarfile.open(tgz) as tar:
        tar.extractall(into, filter="data")
    return into / tgz.name.removesuffix(".tgz")


def _sweep(path: Path) -> Path:
    from latscope.analysis.knee import Knee
    from latscope.analysis.sweep import Step, SweepAnalysis
    from latscope.analysis.sweepfile import SweepFile, SweepMeta, write_sweep
    from latscope.rundir import RunDir

    run = RunDir.create("sweep", path)
    steps = [Step(c, {"requests_per_s": 10.0 * c, "ttft_p99_ms": 50.0 * c},
                  run_dir=str(write_run(path / f"step-{c}", seed=c, concurrency=c, n=40)))
             for c in (1, 2, 4)]
    meta = SweepMeta(url="http://127.0.0.1:8000", mode="concurrency", loads=[1, 2, 4],
                     slo=None, latency_cap=None, backoff=0.1, bench={})
    knee = Knee(load=2, index=1, method="kneedle", score=0.5, stability=1.0,
                measured_past=True, confidence="high")
    write_sweep(run.file("sweep.json"), SweepFile(meta=meta, steps=steps,
                                                  analysis=SweepAnalysis(knee=knee)))
    run.finish("ok")
    return path


def _tune(path: Path) -> Path:
    from latscope.analysis.tune import Param, Trial, TuneSpec, TuneState
    from latscope.rundir import RunDir

    run = RunDir.create("tune", path)
    state = TuneState(path, TuneSpec(params=[Param("max_num_seqs", (1, 2))], serve_cmd=None,
                                     local=True, slo="", workload={"concurrency": "4"}))
    state.trials = [Trial(config={"max_num_seqs": 1}, status="done", feasible=True, value=3.0,
                          metrics={"requests_per_s": 3.0}),
                    Trial(config={"max_num_seqs": 2}, status="failed", error="did not start")]
    state.save()
    run.finish("ok")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    watch = shutil.copytree(_extract(DATA / "passive" / "passive-healthy.tgz", root / "p"),
                            root / "watch")
    manifest = json.loads((watch / "manifest.json").read_text())
    manifest.update(kind="watch", passive={**manifest["passive"], "via": "watch"})
    (watch / "manifest.json").write_text(json.dumps(manifest))  # a watch's is a passive run's
    made = {
        "diagnose": _extract(DATA / "gpu-matrix" / "eager.tgz", root / "g"),
        "passive": root / "p" / "passive-healthy", "watch": watch,
        "bench": write_run(root / "bench", seed=1), "sweep": _sweep(root / "sweep"),
        "tune": _tune(root / "tune")}
    ranks = [str(DATA / "multi-rank" / f"hta_sampled_rank-{i}.json.gz") for i in (0, 1)]
    log = made["diagnose"] / "server.log.gz"  # the H200 vLLM's log the recorded run read
    for kind, argv in (("trace", ["trace", *ranks, "--quiet"]), ("logs", ["logs", str(log)]),
                       ("doctor", ["doctor", "--root", str(DOCTOR_CAPTURE)]),
                       ("compare", ["compare", str(made["bench"]),
                                    str(write_run(root / "b2", seed=2))])):
        assert main([*argv, "-o", str(root / kind)]) in (0, 1), kind
        made[kind] = root / kind
    return made


def _report(capsys, *argv: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["report", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _holds(original, again, where="$"):
    """Every key and value of ``original`` is in ``again`` (the model may add its own nulls):
    nothing the file held is lost on the way through the typed model."""
    if isinstance(original, dict):
        assert isinstance(again, dict), where
        for key, value in original.items():
            assert key in again, f"{where}.{key} lost"
            _holds(value, again[key], f"{where}.{key}")
    elif isinstance(original, list):
        assert isinstance(again, list) and len(again) == len(original), where
        for i, (a, b) in enumerate(zip(original, again)):
            _holds(a, b, f"{where}[{i}]")
    elif isinstance(original, float) and isinstance(again, float):
        assert math.isclose(original, again, rel_tol=1e-9), where  # trace's ms -> ns -> ms
    else:
        assert original == again, where


MAIN = {"diagnose": "report.json", "passive": "report.json", "watch": "report.json",
        "compare": "compare.json", "bench": "summary.json", "sweep": "sweep.json",
        "tune": "tune.json", "trace": "trace.json", "doctor": "doctor.json", "logs": "log.json"}


@pytest.mark.parametrize("name", list(MAIN))
def test_json_is_the_main_document_through_its_model_and_nothing_else(runs, capsys, name):
    code, out, err = _report(capsys, runs[name], "--format", "json")
    assert code == 0, err
    printed = json.loads(out)  # the whole of stdout is one JSON value
    _holds(json.loads((runs[name] / MAIN[name]).read_text()), printed)


@pytest.mark.parametrize("name", list(MAIN))
def test_text_is_the_show_view_in_80_columns_without_colour(runs, capsys, name):
    code, out, err = _report(capsys, runs[name], "--format", "text")
    assert code == 0, err
    kind = json.loads((runs[name] / "manifest.json").read_text())["kind"]
    assert out.startswith(f"{kind} run, status ")
    assert "\x1b[" not in out and max(len(line) for line in out.splitlines()) <= 80
    assert main(["show", str(runs[name])]) == 0  # the alias: the same view, byte for byte
    assert capsys.readouterr().out == out


@pytest.mark.parametrize("name, says", [
    ("diagnose", "VERDICT"), ("passive", "Live traffic"), ("watch", "No load sent"),
    ("compare", "NO REGRESSION")])
def test_markdown_where_the_kind_has_a_renderer(runs, capsys, name, says):
    code, out, err = _report(capsys, runs[name], "--format", "md")
    assert code == 0, err
    assert out.startswith("# latscope") and says in out
    if name != "compare":  # the recorded verdict, as this latscope words it
        verdict = json.loads((runs[name] / "report.json").read_text())["verdict"]["text"]
        assert verdict.split(":")[0] in " ".join(out.split())


@pytest.mark.slow  # vl-convert renders the charts: 1-3 s a page
@pytest.mark.parametrize("name", ["diagnose", "compare"])
def test_html_to_a_file_is_self_contained(runs, capsys, tmp_path, name):
    page = tmp_path / "page.html"
    code, out, err = _report(capsys, runs[name], "--format", "html", "-o", page)
    assert code == 0 and out == "", err
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert "<script" not in html.lower() and "default-src 'none'" in html
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing to fetch: opens offline


@pytest.mark.parametrize("name", ["bench", "sweep", "tune", "trace", "doctor", "logs"])
@pytest.mark.parametrize("fmt", ["md", "html", "files"])
def test_a_kind_without_pages_is_refused_naming_what_it_has(runs, capsys, tmp_path, name, fmt):
    out_file = tmp_path / "x"
    code, out, err = _report(capsys, runs[name], "--format", fmt,
                             *(["-o", out_file] if fmt != "files" else []))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "has no" in err and "(it has text, json)" in err
    assert not out_file.exists() and not (runs[name] / "report.md").exists()


def test_every_kind_latscope_writes_has_a_view():
    from latscope.cli.report import FORMATS
    from latscope.report.rerender import FORMATS as RENDERED

    assert FORMATS == RENDERED
    assert {k for k in KINDS} >= {"diagnose", "watch", "fleet", "compare", "bench", "sweep",
                                  "tune", "trace", "doctor", "net", "logs"}
    assert formats_of("fleet") == ("text", "md", "html", "json", "files")
    assert formats_of("gateway") == ("text",)  # a kind it does not know: the show view only


def test_no_format_rewrites_a_reports_pages_and_prints_the_others_text(runs, capsys, tmp_path):
    run = shutil.copytree(runs["passive"], tmp_path / "p")
    (run / "report.md").write_text("stale")
    (run / "report.html").unlink()
    before = (run / "report.json").read_bytes()
    code, out, err = _report(capsys, run)
    assert code == 0, err
    assert (run / "report.md").read_text().startswith("# latscope")
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert (run / "report.json").read_bytes() == before  # the data are not rewritten
    assert "report.html" in out and "KiB" in out
    code, out, _ = _report(capsys, runs["bench"])
    assert code == 0 and out.startswith("bench run, status ")


def _broken(tmp_path: Path, runs, name: str, file: str, content: bytes | None) -> Path:
    run = shutil.copytree(runs[name], tmp_path / name)
    if content is None:
        (run / file).unlink()
    else:
        (run / file).write_bytes(content)
    return run


@pytest.mark.parametrize("name, file, content, fmt, says", [
    ("diagnose", "report.json", b'{"schema_version": 1, ', "json", "not valid JSON"),
    ("diagnose", "report.json", None, "md", "report.json: not found"),
    ("diagnose", "report.json", b'{"schema_version": 2}', "html", "schema_version 2 is newer"),
    ("bench", "summary.json", b'{"schema_version": 9}', "json", "schema_version 9 is newer"),
    ("tune", "tune.json", b'{"version": 3}', "json", "version 3 is newer"),
    ("compare", "compare.json", b'{"schema_version": 1}', "md", "not a comparison"),
    ("sweep", "sweep.json", b'{"steps": [{"load": "one"}]}', "json", "not a sweep"),
    ("passive", "manifest.json", b'{"schema_version": 99, "kind": "diagnose"}', "text",
     "schema_version 99"),
])
def test_a_bad_main_document_is_one_line_exit_2_and_nothing_written(
        runs, capsys, tmp_path, name, file, content, fmt, says):
    run = _broken(tmp_path, runs, name, file, content)
    page = tmp_path / "out"
    code, out, err = _report(capsys, run, "--format", fmt, "-o", page)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: ") and says in err, err
    assert not page.exists()


def test_a_folder_latscope_did_not_write_and_a_bad_output(runs, capsys, tmp_path):
    code, _, err = _report(capsys, tmp_path, "--format", "json")
    assert code == 2 and "not a latscope run directory" in err and err.count("\n") == 1
    code, _, err = _report(capsys, runs["bench"], "-o", tmp_path / "no" / "such" / "file")
    assert code == 2 and "does not exist" in err
    code, _, err = _report(capsys, runs["passive"], "--format", "files", "-o", tmp_path / "f")
    assert code == 2 and "-o FILE goes with" in err and not (tmp_path / "f").exists()


def test_an_impossible_number_leaves_the_old_pages_as_they_were(runs, capsys, tmp_path):
    run = shutil.copytree(runs["passive"], tmp_path / "p")
    report = json.loads((run / "report.json").read_text())
    report["verdict"]["share"] = 1.5  # 150%: refused, never printed
    (run / "report.json").write_text(json.dumps(report))
    md = (run / "report.md").read_bytes()
    code, out, err = _report(capsys, run)
    assert code == 2 and "above 100%" in err and err.count("\n") == 1
    assert (run / "report.md").read_bytes() == md


def test_an_unfinished_diagnose_still_shows_its_findings_as_text(runs, capsys, tmp_path):
    run = _broken(tmp_path, runs, "diagnose", "report.json", None)
    code, out, _ = _report(capsys, run, "--format", "text")
    assert code == 0 and "no report.json yet" in out and "GPU idle" in out
    text = tmp_path / "view.txt"
    assert _report(capsys, run, "--format", "text", "-o", text)[:2] == (0, "")
    assert text.read_text() == out


def test_a_killed_bench_is_rebuilt_from_its_records_as_show_does(runs, capsys, tmp_path):
    run = _broken(tmp_path, runs, "bench", "summary.json", None)
    code, out, err = _report(capsys, run, "--format", "json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["requests"]["total"] == 200 and "requests.jsonl" in summary["rebuilt"]
