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


def test_the_mean_in_flight_is_every_requests_time_in_flight_in_the_window_over_it():
    # 2 slots of 100 ms requests, a send every 50 ms from 0 to 450 ms (the window), and a
    # warm-up sent at -60 ms, in flight 40 ms of the window: in the window the measured ones
    # spend 8 x 100 ms (those ending by 450) + 50 ms (the one sent at 400, up to 450) + 0 (sent
    # at 450), the warm-up 40 ms: 890 ms over 450 ms
    measured = [_rec(i, 50 * i, 100) for i in range(10)]
    warm = [_rec(100, -60, 100, warmup=True)]
    failed = _rec(11, 200, 10, error="http_5xx")  # in flight 10 ms: a failure counts too
    want = (8 * 100 + 50 + 0 + 40 + 10) / 450
    records = measured + warm + [failed]
    for order in range(3):
        random.Random(order).shuffle(records)
        assert summarize(records)["throughput"]["mean_in_flight"] == pytest.approx(want)
    # batched (numpy) and one by one alike, and merged from two shares on other clocks
    slow = RunStats()
    slow._FAST = False
    for r in records:
        slow.add(r)
    assert slow.summary()["throughput"]["mean_in_flight"] == pytest.approx(want)
    a, b = RunStats(), RunStats()
    for i, r in enumerate(records):
        shifted = RequestRecord.from_dict(r.to_dict())
        if i % 2:
            for name in ("scheduled_ns", "sent_ns", "first_token_ns", "end_ns"):
                if getattr(shifted, name):
                    setattr(shifted, name, getattr(shifted, name) + 7 * MS)
        (b if i % 2 else a).add(shifted)
    a.merge(b, 7 * MS)
    assert a.summary()["throughput"]["mean_in_flight"] == pytest.approx(want)


def _in_flight(records, lo: int, hi: int) -> float:
    """Requests in flight over [lo, hi] on average, from the records themselves."""
    busy = sum(max(0, min(r.end_ns, hi) - max(r.sent_ns, lo)) for r in records if r.end_ns)
    return busy / (hi - lo)


@pytest.mark.serial
def test_a_closed_loop_reports_the_window_in_which_it_holds_its_concurrency(server, tmp_path):
    # 8 slots of ~95 ms requests, 6 each, no warm-up: slot 0 sends alone, the others follow
    # one by one (the stagger). Counted, that ramp held ~6.6 in flight on average over the
    # statistics' window; the statistics now start at the send that makes 8 in flight, the
    # ramp's sends come on top of -n as warm-up requests, and what was held is reported
    result = _bench(server, tmp_path, concurrency=8, n=48, warmup=0, tokens=16)
    s, records = result.summary, result.records
    measured = [r for r in records if not r.warmup]
    ramp = [r for r in records if r.warmup]
    assert len(measured) == 48 == s["requests"]["total"] and s["requests"]["completed"] == 48
    assert len(ramp) == s["load"]["ramp_requests_excluded"] == s["requests"]["warmup_excluded"]
    assert len(ramp) >= 7  # slot 0's pilot and the other slots' first sends but the last's
    held = min(r.sent_ns for r in measured)  # the last slot's first send
    assert max(r.sent_ns for r in ramp) < held <= result.manifest["start_ns"] + 5 * MS
    last = max(r.sent_ns for r in measured)
    assert s["load"]["mean_in_flight"] == pytest.approx(_in_flight(records, held, last))
    assert s["load"]["mean_in_flight"] > 7.0  # of 8 asked: only the client's gaps between
    # a request's end and the slot's next send are missing
    assert s["load"]["stagger"][0]["ramp_requests"] == len(ramp) and s["load"]["ramp_note"]


def test_a_warm_up_absorbs_the_ramp_and_n_counts_measured_requests(server, tmp_path):
    # 16 warm-up requests: the ramp's sends (about one a slot) are among them, and the 32
    # measured requests are exactly the indices that follow the warm-up
    result = _bench(server, tmp_path, concurrency=4, n=32, warmup=16, tokens=4)
    measured = sorted(r.index for r in result.records if not r.warmup)
    assert measured == list(range(16, 48))
    assert result.summary["load"]["ramp_requests_excluded"] == 0


@pytest.mark.serial
def test_a_closed_loops_duration_runs_from_its_first_measured_send(server, tmp_path):
    # --duration without warm-up: the ramp first (warm-up requests), then 0.6 s measured
    server.reset()
    config = BenchConfig(url=server.url, duration_s=0.6, concurrency=4, model="fake-model",
                         output_dir=tmp_path / "run")
    config.workload.output_len = "8"
    result = run_bench(config)
    start = result.manifest["start_ns"]
    ramp = [r for r in result.records if r.warmup]
    measured = [r for r in result.records if not r.warmup]
    assert ramp and max(r.sent_ns for r in ramp) < start <= min(r.sent_ns for r in measured)
    span = (max(r.sent_ns for r in measured) - start) / 1e9
    assert 0.45 < span < 0.6  # sends stop at the duration's end, counted from the start
