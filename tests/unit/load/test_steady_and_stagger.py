"""A step's throughput is its steady window's; a closed loop's slots never send in lockstep."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fakeserver import FakeServer
from latscope.load import BenchConfig, run_bench
from latscope.load.arrival import arrival_offsets_ns
from latscope.model import RequestRecord
from latscope.stats import RunStats, summarize

MS = 1_000_000


def _rec(i: int, sent_ms: float, took_ms: float, *, warmup: bool = False,
         error: str | None = None, out: int = 10) -> RequestRecord:
    sent = int(sent_ms * MS)
    return RequestRecord(index=i, request_id=f"r{i}", scheduled_ns=sent, sent_ns=sent,
                         first_token_ns=sent + MS, end_ns=sent + int(took_ms * MS),
                         output_tokens=out, output_tokens_source="usage", prompt_tokens=5,
                         warmup=warmup, error_kind=error)


def test_steady_window_runs_from_the_first_measured_send_to_the_last_send():
    # closed loop, 2 slots, every request 100 ms: a send every 50 ms from 0 to 450 ms
    measured = [_rec(i, 50 * i, 100) for i in range(10)]
    warm = [_rec(100, -50, 100, warmup=True),  # ends at 50 ms: inside the window, counted
            _rec(101, -110, 100, warmup=True)]  # ends at -10 ms: before it
    failed = _rec(11, 200, 10, error="http_5xx")  # in the window, but not a completion
    records = measured + warm + [failed]
    random.Random(1).shuffle(records)  # the order records are merged in must not matter
    s = summarize(records)
    thr = s["throughput"]
    # ends <= 450 ms: measured 0..7 (8) and one warm-up, over 0.45 s
    assert thr["window_requests"] == 9 and thr["window_s"] == pytest.approx(0.45)
    assert thr["requests_per_s"] == pytest.approx(9 / 0.45)
    assert thr["output_tokens_per_s"] == pytest.approx(90 / 0.45)
    assert thr["total_tokens_per_s"] == pytest.approx(9 * 15 / 0.45)
    # the overall rate, first send to last end (550 ms), the drain included, is kept beside
    assert thr["overall"]["requests_per_s"] == pytest.approx(10 / 0.55)
    assert "drain" in thr["overall"]["window"] and "steady" in thr["window"]


def test_too_short_a_window_falls_back_to_the_overall_rate():
    s = summarize([_rec(0, 0, 100), _rec(1, 1, 100)])  # both in flight at the last send
    assert s["throughput"]["requests_per_s"] == pytest.approx(2 / 0.101)
    assert "drain" in s["throughput"]["window"]


def test_the_steady_window_keeps_only_what_ended_after_the_latest_send():
    stats = RunStats()
    for i in range(5000):  # 8 slots of 80 ms requests, added as they end
        stats.add(_rec(i, 10 * i, 80))
        assert len(stats.steady.pending) <= 8
    assert stats.summary()["throughput"]["requests_per_s"] == pytest.approx(100, rel=0.01)


@pytest.fixture(scope="module")
def server():
    with FakeServer(ttft_ms=20, itl_ms=5) as srv:
        yield srv


def _bench(server, tmp_path, concurrency: int, n: int, warmup: int, tokens: int = 16,
           stagger: bool = True):
    server.reset()
    config = BenchConfig(url=server.url, num_requests=n, concurrency=concurrency, warmup=warmup,
                         output_dir=tmp_path / "run", model="fake-model", stagger=stagger)
    config.workload.output_len = str(tokens)
    return run_bench(config)


def test_a_closed_loop_step_is_not_sent_in_lockstep(server, tmp_path):
    # equal requests (20 + 31 * 5 = 175 ms) from 8 slots: started together, every request left
    # within 2 ms of all 7 others (median 7); staggered, about 22 ms apart. A loaded box's late
    # loop turns can still bunch a few sends (a median of 3 was seen at load average 10): the
    # bound is what separates the two, not a perfect spread
    result = _bench(server, tmp_path, concurrency=8, n=48, warmup=8, tokens=32)
    sends = np.array(sorted(r.sent_ns for r in result.records if not r.warmup))
    near = [int((np.abs(sends - t) <= 2 * MS).sum()) - 1 for t in sends]
    assert np.median(near) <= 4, near
    drawn = result.summary["load"]["stagger"]
    assert drawn[0]["slots"] == 8 and drawn[0]["request_time_from"] == "pilot"
    assert drawn[0]["spacing_ms"] == pytest.approx(drawn[0]["request_time_ms"] / 8)
    assert 170 <= drawn[0]["request_time_ms"] < 1000
    manifest = (result.run_dir / "manifest.json").read_text()
    assert '"stagger"' in manifest


def test_a_burst_on_purpose_sends_every_slot_at_once(server, tmp_path):
    # --no-stagger (a test of queueing wants all of them at once): the first 8 sends within a
    # few ms of each other, no pilot request
    result = _bench(server, tmp_path, concurrency=8, n=8, warmup=0, stagger=False)
    sends = sorted(r.sent_ns for r in result.records)
    assert (sends[-1] - sends[0]) < 100 * MS, [(s - sends[0]) / MS for s in sends]


def test_a_steps_throughput_is_its_steady_window(server, tmp_path):
    result = _bench(server, tmp_path, concurrency=4, n=40, warmup=4, tokens=8)
    thr, e2e = result.summary["throughput"], result.summary["e2e_ms"]
    # all 4 slots busy: Little's law, X = c / mean E2E
    assert thr["requests_per_s"] == pytest.approx(4 / (e2e["mean"] / 1e3), rel=0.15)
    # the overall figure counts the drain after the last send (3 requests, then 2, then 1)
    assert thr["overall"]["requests_per_s"] < 0.97 * thr["requests_per_s"]
    assert thr["overall"]["requests_per_s"] == pytest.approx(40 / result.summary["duration_s"])


@pytest.mark.parametrize("duration", [None, 0.6])
def test_an_open_loops_warm_up_is_its_first_arrivals_at_the_rate(server, tmp_path, duration):
    # 20 warm-up requests at 100 req/s, each ~95 ms: one at a time (what an uncapped open loop
    # did) they took ~2 s and never overlapped; as the first arrivals they span ~0.2 s
    server.reset()
    config = BenchConfig(url=server.url, rate=100.0, warmup=20, model="fake-model", seed=5,
                         num_requests=None if duration else 30, duration_s=duration,
                         output_dir=tmp_path / "run")
    config.workload.output_len = "16"
    result = run_bench(config)
    records = sorted(result.records, key=lambda r: r.index)
    warm = [r for r in records if r.warmup]
    measured = [r for r in records if not r.warmup]
    assert [r.index for r in warm] == list(range(20)) and all(r.open_loop for r in records)
    # one arrival schedule from the first warm-up request to the last measured one, the
    # measured part later only by what starting the measurement took past its first arrival
    offsets = arrival_offsets_ns(100.0, len(records), seed=5)
    scheduled = np.array([r.scheduled_ns for r in records])
    assert np.array_equal(scheduled[:20] - scheduled[0], offsets[:20])
    assert np.array_equal(scheduled[20:] - scheduled[20], offsets[20:] - offsets[20])
    assert 0 <= (scheduled[20] - scheduled[0]) - offsets[20] < 500 * MS  # not a 2 s c=1 warm-up
    assert any(b.sent_ns < a.end_ns for a, b in zip(warm, warm[1:]))  # in flight together
    # the measurement starts once the warm-up arrivals are out (the loop's timers may wake a
    # fraction of a millisecond early: 0.38 ms was seen) and before the first measured send
    start_ns = result.manifest["start_ns"]
    assert max(r.scheduled_ns for r in warm) - 2 * MS <= start_ns <= measured[0].sent_ns
    assert result.manifest["warmup_mode"].startswith("continuous: the first arrivals")
    if duration:  # the measured --duration starts where the warm-up arrivals end
        span = (max(r.scheduled_ns for r in measured) - measured[0].scheduled_ns) / 1e9
        assert 0.4 < span < duration and len(measured) > 30
    else:
        assert len(measured) == 30
