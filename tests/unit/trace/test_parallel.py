"""trace --jobs: per-rank analyses in separate processes give the same answers as in one, a bad
file is reported without losing the others, and the cross-rank view reads collective skew."""

from __future__ import annotations

import os
import shutil

import pytest

from latscope.errors import LatscopeError
from latscope.trace.analyze import AnalysisOptions
from latscope.trace.parallel import analyze_files, collective_skew, cross_rank
from latscope.trace.results import RankSummary

TRACE = "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz"


def test_collective_skew_finds_the_rank_the_others_wait_for():
    seqs = {("a", 0): (["ar", "ar", "ag"], [5000, 5000, 100]),
            ("b", 0): (["ar", "ar", "ag"], [2000, 3000, 100]),
            ("c", 0): (["ar", "ar"], [4000, 3000])}
    rows = {k: RankSummary(path=k[0], rank=i, device=0, window_ns=100_000, busy_ns=0,
                           idle_share=0.0, comm_share=0.0, exposed_comm_share=0.0)
            for i, k in enumerate(seqs)}
    out = collective_skew(seqs, rows)
    assert out.matched == 2  # the shortest sequence bounds the match
    waits = {r.path: r.wait_ns for r in out.per_rank}
    assert waits == {"a": 3000 + 2000, "b": 0, "c": 2000 + 0}
    assert out.straggler.path == "b" and out.skew_max_ns == 3000
    assert out.notes  # says that the ranks ran different numbers of collectives


def test_positions_with_different_kernels_are_not_matched():
    seqs = {("a", 0): (["ar", "x"], [10, 10]), ("b", 0): (["ar", "y"], [4, 1])}
    out = collective_skew(seqs, {})
    assert out.matched == 1 and out.skew_max_ns == 6


@pytest.fixture()
def rank_files(tmp_path, fixtures_dir):
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"rank{i}.pt.trace.json.gz"))
        shutil.copy(fixtures_dir / "traces" / TRACE, paths[-1])
    return paths


@pytest.mark.slow
def test_jobs_give_the_same_results_as_one_process(rank_files, tmp_path):
    bad = tmp_path / "broken.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", ')
    files = [rank_files[0], str(bad), *rank_files[1:]]
    serial = analyze_files(files, AnalysisOptions(), jobs=1)
    parallel = analyze_files(files, AnalysisOptions(), jobs=2)
    assert isinstance(parallel[1].error, LatscopeError) and parallel[1].result is None
    for a, b in zip(serial, parallel):
        assert a.path == b.path
        if a.result is not None:
            assert a.result.devices[0].breakdown == b.result.devices[0].breakdown
            assert a.collectives == b.collectives
    assert {a.pid for a in serial} == {os.getpid()}
    assert os.getpid() not in {b.pid for b in parallel}
    view = cross_rank(parallel)
    assert len(view.ranks) == 3  # the broken file is a worker entry with its error
    assert [w.error is not None for w in view.workers] == [False, True, False, False]
    coll = view.collectives
    assert coll.matched > 0 and coll.skew_max_ns == 0  # identical copies
