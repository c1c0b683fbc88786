"""The AIMD in-flight limit, one control interval at a time."""

from __future__ import annotations

import pytest

from latscope.gateway.limit import AimdLimit, FixedLimit, Observation


def test_doubles_until_the_upstream_first_queues_then_grows_by_a_tenth():
    limit = AimdLimit(initial=8)
    room = Observation(queued=5, peak_inflight=8, upstream_waiting=0)
    assert limit.update(room) == 16  # slow start: a GPU server may take hundreds at once
    assert limit.update(room) == 32
    assert "doubling" in limit.last_reason
    queued = Observation(queued=5, peak_inflight=32, upstream_waiting=20, inflight=32)
    limit.update(queued)
    assert limit.update(queued) == 15  # took 12, plus a headroom of 3
    assert limit.update(room) == 17  # after congestion: a tenth (at least 1) at a time
    assert limit.update(room) == 19
    assert limit.last_reason == "room: growing"


def test_slow_start_reaches_a_large_batch_within_seconds():
    limit = AimdLimit(initial=8)
    ticks = 0
    while limit.value < 450:
        limit.update(Observation(queued=100, peak_inflight=limit.value, upstream_waiting=0))
        ticks += 1
    assert ticks * limit.interval_s <= 3.5  # a tenth at a time took 21 s


def test_holds_when_the_limit_is_not_reached():
    limit = AimdLimit(initial=8)
    assert limit.update(Observation(queued=0, peak_inflight=3, upstream_waiting=0)) == 8
    assert limit.last_reason == "steady"


def test_upstream_waiting_twice_drops_to_what_the_upstream_took_plus_headroom():
    limit = AimdLimit(initial=12)
    # 12 forwarded, 8 of them waiting in vLLM: it takes 4 (its running gauge, caught between
    # one request ending and the next starting, says 3 and is not what counts); one more is
    # left waiting there so that its next step never lacks a request
    busy = Observation(queued=3, peak_inflight=12, upstream_waiting=8, upstream_running=3,
                       inflight=12)
    assert limit.update(busy) == 12  # once can be a request caught before its first step
    assert limit.update(busy) == 5
    assert "waiting" in limit.last_reason


def test_waiting_within_the_headroom_lets_the_limit_grow():
    limit = AimdLimit(initial=5)
    ready = Observation(queued=3, peak_inflight=5, upstream_waiting=1, inflight=5)
    assert limit.update(ready) == 10
    assert limit.update(ready) == 20


def test_waiting_beyond_the_gateways_own_requests_backs_off_multiplicatively():
    # other clients fill the upstream: what it took of ours is unknown
    limit = AimdLimit(initial=10, backoff=0.5)
    busy = Observation(queued=3, peak_inflight=10, upstream_waiting=20, inflight=10)
    limit.update(busy)
    assert limit.update(busy) == 5


def test_ttft_target_backs_off_only_when_set():
    slow = Observation(ttft_s=[0.9, 1.0, 1.1], queued=2, peak_inflight=8)
    assert AimdLimit(initial=8).update(slow) == 16  # no target: TTFT is not a signal
    assert AimdLimit(initial=8, ttft_target_s=0.5, backoff=0.5).update(slow) == 4
    # the median follows the many short requests, not one long prefill
    mostly_fast = Observation(ttft_s=[0.1, 0.1, 5.0], queued=2, peak_inflight=8)
    assert AimdLimit(initial=8, ttft_target_s=0.5).update(mostly_fast) == 16


def test_stays_within_bounds():
    limit = AimdLimit(initial=2, min_limit=2, max_limit=3)
    busy = Observation(upstream_waiting=2, inflight=3)
    limit.update(busy)
    assert limit.update(busy) == 2
    for _ in range(3):
        limit.update(Observation(queued=1))
    assert limit.value == 3


def test_fixed_limit_never_moves_and_bad_values_are_refused():
    assert FixedLimit(4).update(Observation(upstream_waiting=9, inflight=1)) == 4
    with pytest.raises(ValueError):
        FixedLimit(0)
    with pytest.raises(ValueError):
        AimdLimit(backoff=1.5)


def test_others_queue_upstream_while_none_of_ours_is_there_leaves_the_limit():
    # an A/B's direct runs fill the server while the gateway idles between its own runs
    limit = AimdLimit(initial=80)
    idle = Observation(queued=0, peak_inflight=0, upstream_waiting=64, inflight=0)
    for _ in range(20):
        limit.update(idle)
    assert limit.value == 80
    ours_too = Observation(queued=3, peak_inflight=10, upstream_waiting=64, inflight=10)
    limit.update(ours_too)
    assert limit.update(ours_too) == 64  # ours are upstream: back off (0.8x)
