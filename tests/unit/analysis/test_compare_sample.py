"""One pass over requests.jsonl for ``latscope compare``: a line at a time (a torn last line
skipped, a bad line elsewhere a one-line error), warm-up left out, failures counted, and the
token gaps of a long run kept only for a uniform sample of its requests, the mean ITL exact."""

from __future__ import annotations

import numpy as np
import pytest

from compare_samples import write_run
from latscope.analysis import compare_sample
from latscope.analysis.compare_sample import read_sample
from latscope.errors import ConfigError
from latscope.rundir import read_run


def test_the_figures_are_the_records_and_warm_up_is_left_out(tmp_path):
    run = write_run(tmp_path / "r", n=40, warmup=5, fail_every=10, seed=3)
    s = read_sample(run)
    _, records, _ = read_run(run)
    measured = [r for r in records if not r.warmup]
    assert s.measured == 40 and s.warmup == 5
    assert s.completed == 36 and s.errors == {"http_5xx": 4}
    ok = [r for r in measured if r.ok]
    want = sorted((r.first_token_ns - r.sent_ns) / 1e6 for r in ok)
    assert sorted(s.ttft[~np.isnan(s.ttft)]) == pytest.approx(want)
    assert np.all(np.diff(s.origins) >= 0)  # send order
    gaps = np.concatenate([np.diff(r.chunk_ns) / 1e6 for r in ok])
    assert s.itl_sum.sum() / s.itl_count.sum() == pytest.approx(gaps.mean())
    assert s.closed_loop


def test_a_torn_last_line_is_skipped_and_a_bad_line_elsewhere_is_one_error(tmp_path):
    run = write_run(tmp_path / "r", n=10)
    path = run / "requests.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines) + lines[0][:40])  # a crash mid-write
    assert read_sample(run).measured == 10
    path.write_bytes(b"".join(lines[:3]) + b"{not json\n" + b"".join(lines[3:]))
    with pytest.raises(ConfigError, match=r"requests.jsonl:4: not a JSON line"):
        read_sample(run)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no requests.jsonl"):
        read_sample(tmp_path / "empty")


def test_token_gaps_past_the_budget_are_a_uniform_sample_of_whole_requests(tmp_path,
                                                                           monkeypatch):
    run = write_run(tmp_path / "r", n=400, output_tokens=11, seed=4)  # 10 gaps a request
    monkeypatch.setattr(compare_sample, "ITL_GAP_BUDGET", 1000)
    s = read_sample(run)
    assert s.itl_requests == 400
    assert s.itl_sampled == 100 and s.itl_gaps.size == 1000  # whole requests, to the budget
    assert sorted(set(s.itl_request.tolist())) == list(range(100))
    full = read_sample(run)  # the same seed draws the same sample
    assert np.array_equal(full.itl_gaps, s.itl_gaps)
    # the mean stays exact over every request: it is summed as the requests pass
    monkeypatch.setattr(compare_sample, "ITL_GAP_BUDGET", 1 << 20)
    whole = read_sample(run)
    assert whole.itl_sampled == 400
    assert s.itl_sum.sum() == pytest.approx(whole.itl_sum.sum())


def test_goodput_counts_the_requests_meeting_the_slo(tmp_path):
    run = write_run(tmp_path / "r", n=100, ttft_ms=50, seed=5)
    s = read_sample(run, "ttft<=50")
    assert s.good is not None
    ttft = s.ttft
    assert s.good.sum() == int(np.sum(ttft <= 50))
    assert read_sample(run).good is None
