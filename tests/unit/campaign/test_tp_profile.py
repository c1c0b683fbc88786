"""A tensor-parallel server's profile in diagnose: every rank's file of the profile is collected
(vLLM 0.26's naming), each analysed, the cross-rank view stored in trace.json, read back by
--replay, its findings joined to their causes, and the report's cross-rank section rendered.
On real multi-rank traces: two ranks of one NCCL job (tests/data/multi-rank, from HTA), and a
straggler planted in two copies of the real vLLM TP8 rank-0 trace (one copy's collectives each
150 us longer: that rank waited for the other)."""

from __future__ import annotations

import gzip
import json
import os
import re
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from latscope.findings.trace import trace_findings_of

from latscope.campaign import profiling, stages
from latscope.campaign.replay import replay
from latscope.campaign.state import Budget, DiagnoseOptions, Diagnosis
from latscope.findings.causes import as_symptom, join_causes
from latscope.findings.crossrank import crossrank_findings
from latscope.findings.rank import rank
from latscope.findings.verdict import verdict
from latscope.model import Finding, Severity
from latscope.report.diagnose import render_text
from latscope.report.html import render_html
from latscope.report.markdown import render_markdown
from latscope.report.write import typed_report
from latscope.rundir import RunDir
from latscope.trace.analyze import AnalysisOptions
from latscope.trace.parallel import analyze_files, cross_rank
from latscope.trace.profiles import profile_files

DATA = Path(__file__).resolve().parents[2] / "data"
HTA = [str(DATA / "multi-rank" / f"hta_sampled_rank-{r}.json.gz") for r in (0, 1)]
TP8 = "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz"
COMM = re.compile(r"nccl|all_reduce", re.I)
PLANTED_US = 150.0


def _worker(tmp: Path, tp: int, stamp: int) -> Path:
    """A file named as vLLM 0.26's torch profiler names a worker's trace."""
    return tmp / f"dp0_pp0_tp{tp}_dcp0_ep0_rank{tp}.{stamp}.pt.trace.json.gz"


def _touch(path: Path, mtime: float) -> Path:
    path.write_bytes(b"x")
    os.utime(path, (mtime, mtime))
    return path


def test_the_newest_file_of_every_rank_is_the_profile_and_the_api_server_trace_is_not(tmp_path):
    old = _touch(_worker(tmp_path, 0, 100), 1000)
    r1 = _touch(_worker(tmp_path, 1, 201), 2001)
    r0 = _touch(_worker(tmp_path, 0, 200), 2000)
    front = _touch(tmp_path / "host_7.async_llm.202.pt.trace.json.gz", 2002)
    got = profile_files([old, r1, r0, front])
    assert [(f.path, f.rank, f.tp_rank) for f in got] == [(r0, 0, 0), (r1, 1, 1)]
    other = _touch(tmp_path / "myhost_42.300.pt.trace.json", 3000)  # no rank in the name
    assert [f.path for f in profile_files([other, front])] == [other]
    assert profile_files([front]) == []
    # what vLLM 0.32's CPU build wrote here for one `diagnose --profile` (its worker name falls
    # back to rank{R} when the parallel groups are not set up), beside the API server's trace
    cpu = _touch(tmp_path / "rank0.1796203116217275919.pt.trace.json.gz", 4000)
    front2 = _touch(tmp_path / "vm_26302.async_llm.1796203114963261472.pt.trace.json.gz", 3999)
    assert [(f.path, f.rank) for f in profile_files([cpu, front2])] == [(cpu, 0)]


def _state(tp: int | None) -> SimpleNamespace:
    settings = {"tensor_parallel_size": {"value": tp, "source": "cmdline"}} if tp else {}
    return SimpleNamespace(doctor=SimpleNamespace(facts={"server": {"settings": settings}}),
                           log=None, notes=[])


def test_diagnose_waits_for_as_many_rank_files_as_the_server_has_ranks(tmp_path, monkeypatch):
    monkeypatch.setattr(profiling, "SETTLE_S", 0.0)
    before = {_touch(_worker(tmp_path, 0, 1), 1000)}  # an earlier profile's file
    r0 = _touch(_worker(tmp_path, 0, 2), 2000)
    _touch(tmp_path / "h_1.async_llm.3.pt.trace.json.gz", 2001)
    # TP=2 and one rank written: at its deadline, the rank there is, said so
    state = _state(2)
    assert profiling._wait_for_profile(state, tmp_path, before, 1.5) == [str(r0)]
    assert state.notes == ["profile: 1 rank trace(s) written within 2 s, 2 expected"]
    r1 = _touch(_worker(tmp_path, 1, 2), 2002)
    state = _state(2)
    assert profiling._wait_for_profile(state, tmp_path, before, 30) == [str(r0), str(r1)]
    assert state.notes == []


def _planted_pair(src: Path, tmp: Path) -> list[str]:
    """Two copies of one real rank trace; rank 0's collectives each PLANTED_US longer."""
    data = json.loads(gzip.decompress(src.read_bytes()))
    out = []
    for r in (0, 1):
        events = [dict(e) for e in data["traceEvents"]]
        for e in events:
            if r == 0 and e.get("cat") == "kernel" and COMM.search(e.get("name", "")):
                e["dur"] = e["dur"] + PLANTED_US
        info = {**(data.get("distributedInfo") or {}), "rank": r}
        path = _worker(tmp, r, 1764000000000000000 + r)
        path.write_bytes(gzip.compress(json.dumps({**data, "traceEvents": events,
                                                   "distributedInfo": info}).encode()))
        out.append(str(path))
    return out


@pytest.fixture()
def planted(traces_dir, tmp_path):
    return _planted_pair(traces_dir / TP8, tmp_path)


def test_a_planted_straggler_is_named_with_what_the_other_rank_loses(planted):
    view = cross_rank(analyze_files(planted, AnalysisOptions()))
    coll = view.collectives
    waits = {r.rank: r for r in coll.per_rank}
    assert coll.matched == 74 and coll.straggler.rank == 1
    assert waits[0].wait_ns == pytest.approx(74 * PLANTED_US * 1e3, rel=1e-6)
    by_id = {f.id: f for f in crossrank_findings(view)}
    late = by_id["trace.rank_straggler"]
    window = next(r.window_ns for r in view.ranks if r.rank == 0)
    assert late.severity == Severity.WARNING and late.role == "symptom"
    assert late.impact["share"] == pytest.approx(74 * PLANTED_US * 1e3 / window, abs=1e-4)
    assert late.title.startswith("rank 1 (dp0_pp0_tp1_dcp0_ep0_rank1.")
    # the collectives' own time is the recorded one (2.1 ms of 84 ms): below what is reported
    assert "trace.collective_share" not in by_id


def test_another_process_on_the_straggler_gpu_takes_its_share_in_the_verdict(planted):
    view = cross_rank(analyze_files(planted, AnalysisOptions()))
    late = next(f for f in crossrank_findings(view) if f.id == "trace.rank_straggler")
    other = Finding("gpu.other_process", Severity.WARNING,
                    "1 other process(es) held the server's GPU(s) during the run", layer="gpu")
    ranked, _ = rank(join_causes([as_symptom(late), other]))
    assert [f.id for f in ranked] == ["gpu.other_process"]
    v = verdict(ranked).to_dict()
    assert v["finding_id"] == "gpu.other_process" and v["share"] == late.impact["share"]


def test_nccl_p2p_disabled_takes_the_collectives_share_of_two_real_ranks():
    view = cross_rank(analyze_files(HTA, AnalysisOptions()))
    found = {f.id: f for f in crossrank_findings(view)}
    # the two ranks wait for each other in turn (10.1 % and 8.6 % of their windows): no
    # straggler; their SendRecv collectives' own time is 22 % of the window, exposed 25-28 %
    assert "trace.rank_straggler" not in found
    share = found["trace.collective_share"]
    assert share.severity == Severity.WARNING and share.impact["share"] == pytest.approx(0.2224,
                                                                                          abs=1e-3)
    p2p = Finding("gpu.nccl_p2p_disable", Severity.WARNING, "NCCL peer-to-peer is disabled",
                  layer="gpu")
    ranked, _ = rank(join_causes([as_symptom(share), p2p]))
    v = verdict(ranked).to_dict()
    assert v["finding_id"] == "gpu.nccl_p2p_disable" and v["share"] == share.impact["share"]


def _recorded_run(tmp_path: Path) -> Path:
    """A real diagnose run directory recorded on an H200 (one GPU), as a base."""
    with tarfile.open(DATA / "gpu-matrix" / "saturated-short.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "saturated-short"


def _trace_stage(run_dir: Path, paths: list[str]) -> Diagnosis:
    state = Diagnosis(DiagnoseOptions(trace=tuple(paths)), RunDir.open(run_dir), lambda _: None)
    note = stages.trace(state, None, None, Budget(60))
    assert note.startswith(f"{len(paths)} rank traces")
    return state


def test_the_trace_stage_stores_every_rank_and_replay_reports_the_cross_rank_view(
        planted, tmp_path):
    run = _recorded_run(tmp_path)
    state = _trace_stage(run, planted)
    stored = json.loads((run / "trace.json").read_text())
    assert len(stored["other_ranks"]) == 1 and stored["cross_rank"]["collectives"]["matched"] == 74
    assert "trace.rank_straggler" in {f.id for f in trace_findings_of(state.trace)}
    report = replay(run, tmp_path / "out")
    section = report["cross_rank"]
    assert [r["rank"] for r in section["ranks"]] == [0, 1]
    assert section["straggler"]["rank"] == 1 and section["matched"] == 74
    ranks = {r["rank"]: r for r in section["ranks"]}
    assert ranks[1]["wait_share"] == 0.0 and ranks[0]["wait_share"] > 0.1
    assert ranks[0]["kinds"][0]["kind"] in ("all-reduce", "all-gather")
    straggler = next(f for f in report["findings"] if f["id"] == "trace.rank_straggler")
    assert straggler["impact"]["measured_at"].startswith("c=")  # where the profile was taken
    text = render_text(typed_report(report))
    assert "Ranks (one profile trace per rank):" in text
    assert "the others wait for rank 1 (GPU 0) (it waits least)" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Ranks" in md and "| rank 0 (GPU 0) |" in md
    html = (tmp_path / "out" / "report.html").read_text()
    assert '<section id="ranks">' in html and "rank 1 (GPU 0)" in html


def test_two_real_ranks_render_in_every_report_and_an_impossible_share_is_refused(tmp_path):
    from latscope.report.schema import ReportError

    run = _recorded_run(tmp_path)
    _trace_stage(run, HTA)
    report = replay(run, tmp_path / "out")
    rows = {r["rank"]: r for r in report["cross_rank"]["ranks"]}
    assert rows[0]["wait_share"] == pytest.approx(0.1008, abs=1e-3)
    assert rows[1]["comm_share"] == pytest.approx(0.3079, abs=1e-3)
    assert [k["kind"] for k in rows[0]["kinds"]] == ["send/recv"]
    md = render_markdown(typed_report(report))
    assert "| rank 1 (GPU 1) |" in md and "send/recv 10x" in md
    assert "rank 0 (GPU 0)" in render_html(typed_report(report))
    rows[0]["comm_share"] = 1.5
    with pytest.raises(ReportError, match="above 100%"):
        render_markdown(typed_report(report))
