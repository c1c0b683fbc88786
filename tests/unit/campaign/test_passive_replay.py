"""Recorded passive runs replayed in CI: each planted fault's run directory
(``tests/data/passive/NAME.tgz`` on the local CPU vLLM, ``tests/data/passive-gpu/NAME.tgz`` on an
H200 with vLLM 0.26, recorded by ``benchmarks/diagnose_matrix.py passive``, its
expected verdict in ``scenario.json`` written before it ran) is concluded again from its stored
files alone, and must give that verdict; the replay must agree with what the live run said."""

from __future__ import annotations

import inspect
import json
import tarfile
from pathlib import Path

import pytest

from latscope.campaign.passive import PassiveConclusion, conclude_window
from latscope.campaign.replay import replay
from latscope.findings.verdict import verdict_matches
from latscope.server.scrape import read_snapshots

DATA = Path(__file__).resolve().parents[2] / "data"
RECORDED = sorted(f"{p.parent.name}/{p.stem}" for folder in ("passive", "passive-gpu")
                  for p in (DATA / folder).glob("*.tgz"))


@pytest.fixture(scope="module", params=RECORDED)
def recorded(request, tmp_path_factory) -> tuple[Path, dict]:
    folder, name = request.param.split("/")
    into = tmp_path_factory.mktemp(name)
    with tarfile.open(DATA / folder / f"{name}.tgz") as tar:
        tar.extractall(into, filter="data")
    run = into / name
    return run, json.loads((run / "scenario.json").read_text())


def test_a_recorded_passive_run_replays_to_its_expected_verdict(recorded, tmp_path):
    from latscope.report.markdown import render_markdown
    from latscope.report.write import typed_report

    run, scenario = recorded
    live = json.loads((run / "report.json").read_text())
    # the report.json the live run wrote is read by this latscope (`latscope show/report DIR`)
    assert "## Live traffic" in render_markdown(typed_report(live))
    report = replay(run, tmp_path / "out")
    ok, why = verdict_matches(report["verdict"], scenario["expect"])
    assert ok, f"{scenario['name']}: {why}: {report['verdict']['text']}"
    assert report["verdict"]["finding_id"] == live["verdict"]["finding_id"]
    assert report["window"]["load_sent"] is False
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["passive"]["inference_requests_sent"] == 0
    for name in ("report.json", "report.md", "report.html", "window.json"):
        assert (tmp_path / "out" / name).is_file()
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Live traffic" in md and "No load sent" in md


def test_a_cause_is_named_with_its_share_of_the_real_traffics_server_ttft(recorded, tmp_path):
    run, scenario = recorded
    report = replay(run, tmp_path / "out")
    v = report["verdict"]
    if scenario["expect"]["kind"] == "cause" and v["finding_id"] != "server.stall":
        assert v["share"] is not None and v["target"] == "server_ttft_mean", v["text"]
        assert "of mean server TTFT" in v["text"]
    if scenario["expect"]["kind"] == "healthy":
        assert v["healthy"] and "No configuration fault found" in v["text"]
    assert "Not measured without load" in v["text"]


def test_conclude_window_reads_snapshots_alone_as_a_prometheus_rebuild_gives_them(recorded):
    """The fleet's contract: step times exact, no per-scrape latency, nothing else given."""
    run, _ = recorded
    snaps = read_snapshots(run)
    for s in snaps:
        s.scrape_ms = 0.0
    c = conclude_window(snaps, label="the last 25 s of live traffic")
    assert isinstance(c, PassiveConclusion)
    assert c.facts.window.scrapes == len(snaps) and c.verdict.text
    assert all(f.id for f in c.ranked)
    params = inspect.signature(conclude_window).parameters
    assert list(params)[0] == "snapshots"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for name, p in params.items()
               if name != "snapshots")


def test_every_planted_passive_scenario_has_a_recording():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "diagnose_matrix", Path(__file__).resolve().parents[3] / "benchmarks" / "diagnose_matrix.py")
    assert spec is not None and spec.loader is not None
    matrix = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("diagnose_matrix", matrix)  # dataclasses look their module up
    spec.loader.exec_module(matrix)
    for folder in ("passive", "passive-gpu"):  # the CPU vLLM's and the H200's
        assert {f"{folder}/{s.name}" for s in matrix.PASSIVE} <= set(RECORDED), RECORDED


def test_a_spike_names_the_gpu_busy_while_it_lasted_only_when_it_was(tmp_path):
    from latscope.analysis.traffic import window_facts

    with tarfile.open(DATA / "passive" / "passive-debug-logging.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    snaps = read_snapshots(tmp_path / "passive-debug-logging")
    first, last = snaps[0].wall_time, snaps[-1].wall_time
    every_second = [first + k for k in range(int(last - first) + 1)]
    busy = window_facts(snaps, gpu_util=[(t, 96.0) for t in every_second])
    idle = window_facts(snaps, gpu_util=[(t, 40.0) for t in every_second])
    assert busy.spikes and len(busy.spikes) == len(idle.spikes)
    assert all("the GPU busy (96% of the time)" in s.binding for s in busy.spikes)
    assert not any("GPU" in b for s in idle.spikes for b in s.binding)
    assert all(s.gpu_busy == pytest.approx(0.40) for s in idle.spikes)


def test_a_queue_the_gauges_missed_is_read_from_the_histograms_by_littles_law(tmp_path):
    """The issue's anchor: under a queue that held most of TTFT, the waiting gauge read 0 in
    most samples. Here every sample of the recorded max_num_seqs window is set so; the
    counters and histograms are as vLLM wrote them."""
    import dataclasses

    with tarfile.open(DATA / "passive" / "passive-max-num-seqs.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    snaps = read_snapshots(tmp_path / "passive-max-num-seqs")
    for snap in snaps:
        snap.samples = [dataclasses.replace(s, value=0.0)
                        if s.name.startswith("vllm:num_requests_waiting") else s
                        for s in snap.samples]
    c = conclude_window(snaps, max_num_seqs=2, max_num_seqs_source="the test")
    top = c.ranked[0]
    assert top.id == "server.queue_max_num_seqs" and c.verdict.finding_id == top.id
    little = {e.name: e.value for e in top.evidence if "Little's law" in e.name}
    assert little["requests running, mean (Little's law)"] >= 0.8 * 2
    assert little["requests waiting, mean (Little's law)"] >= 0.5
    assert top.impact["explains"] == "latency.queue" and top.impact["share"] > 0.5
