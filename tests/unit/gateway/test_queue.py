"""Queue order: fcfs by arrival, sjf by deadline (arrival + aging x cost / rate), bounded wait."""

from __future__ import annotations

import pytest

from latscope.gateway.queue import ServedRate, Waiter, WaitQueue


def _drain(queue: WaitQueue, now: float) -> list[str]:
    out = []
    while queue:
        out.append(queue.pop(now).payload)
    return out


def test_fcfs_serves_in_arrival_order_whatever_the_cost():
    q = WaitQueue("fcfs", rate=1000.0)
    for name, cost, t in [("long", 2000, 0.0), ("short", 10, 0.1), ("mid", 500, 0.2)]:
        q.push(Waiter(cost, t, name))
    assert _drain(q, 1.0) == ["long", "short", "mid"]


def test_sjf_lets_short_requests_pass_long_ones_that_came_shortly_before():
    q = WaitQueue("sjf", aging_factor=1.0, rate=1000.0)
    q.push(Waiter(2000, 0.0, "long"))  # deadline 2.0
    q.push(Waiter(10, 0.5, "short"))  # deadline 0.51
    q.push(Waiter(500, 0.6, "mid"))  # deadline 1.1
    assert _drain(q, 1.0) == ["short", "mid", "long"]


def test_aging_bounds_how_long_a_long_request_is_overtaken():
    # a long request (cost 2000 -> deadline 2.0) is passed only by requests whose deadline is
    # earlier: a short one arriving at 1.9 passes it, one arriving at 2.1 no longer does
    q = WaitQueue("sjf", aging_factor=1.0, rate=1000.0)
    q.push(Waiter(2000, 0.0, "long"))
    q.push(Waiter(10, 1.9, "early-short"))
    q.push(Waiter(10, 2.1, "late-short"))
    assert _drain(q, 3.0) == ["early-short", "long", "late-short"]


def test_equal_deadlines_keep_arrival_order():
    q = WaitQueue("sjf", aging_factor=1.0, rate=1000.0)
    for name in "abc":
        q.push(Waiter(100, 0.0, name))
    assert _drain(q, 0.0) == ["a", "b", "c"]


def test_a_waiter_that_left_is_removed_once():
    q = WaitQueue("sjf", rate=1000.0)
    w = q.push(Waiter(100, 0.0, "x"))
    assert q.remove(w) is True
    assert q.remove(w) is False
    with pytest.raises(IndexError):
        q.pop(0.0)


def test_served_rate_is_cost_per_second_over_the_window():
    rate = ServedRate(window_s=10.0, initial=123.0)
    assert rate.value(0.0) == 123.0
    for t in range(1, 6):  # 200 cost units a second
        rate.add(float(t), 200.0)
    assert rate.value(5.0) == pytest.approx(1000.0 / 4.0)  # 1000 units over 4 s
    assert rate.value(100.0) == 123.0  # all aged out of the window: back to the initial guess


def test_measured_rate_changes_the_aging_window():
    # with a slow upstream (10 units/s) a cost of 100 is 10 s of fair share, so a short request
    # arriving 5 s after a long one still passes it; at 1000 units/s it no longer does
    slow = ServedRate(initial=10.0)
    fast = ServedRate(initial=1000.0)
    for rate, expected in ((slow, ["short", "long"]), (fast, ["long", "short"])):
        q = WaitQueue("sjf", aging_factor=1.0, rate=rate)
        q.push(Waiter(100, 0.0, "long"))
        q.push(Waiter(1, 5.0, "short"))
        assert _drain(q, 6.0) == expected


def test_bad_policy_and_aging_are_refused():
    with pytest.raises(ValueError):
        WaitQueue("lifo")
    with pytest.raises(ValueError):
        WaitQueue("sjf", aging_factor=0)


async def test_a_request_holds_its_place_while_its_cost_is_computed():
    """A long request whose /tokenize is slow must not be overtaken by a short one that comes
    later and finds the slot freed meanwhile (it did in CI before waiters were queued at once)."""
    import asyncio

    from latscope.gateway.admission import Admission
    from latscope.gateway.limit import FixedLimit
    from latscope.gateway.metrics import GatewayMetrics

    admission = Admission(WaitQueue("sjf"), FixedLimit(1), 16, GatewayMetrics())
    assert admission.try_now()  # the busy request holds the only slot
    served: list[str] = []

    counting = asyncio.Event()

    async def slow_cost() -> float:
        counting.set()
        await asyncio.sleep(30)  # the upstream's /tokenize, slow
        return 1510.0

    async def long_request() -> None:
        await admission.wait(slow_cost, estimate=1500.0)
        served.append("long")

    task = asyncio.create_task(long_request())
    await asyncio.wait_for(counting.wait(), 5)  # queued, its count outstanding (no fixed sleep)
    admission.release(0.0)  # the busy one ends while the long one's cost is computed
    if admission.try_now():  # a short request arrives now
        served.append("short")
    await task
    assert served == ["long"]
    assert admission.inflight == 1


async def test_a_slot_handed_over_is_used_at_once_not_after_the_cost_is_counted():
    """The count (the upstream's /tokenize) only orders the queue: a waiter given a slot goes,
    even while its count is outstanding (waiting for it held the slot idle for a round trip to
    the busy API server: 3x short TTFT on an H200 with a full batch)."""
    import asyncio

    from latscope.gateway.admission import Admission
    from latscope.gateway.limit import FixedLimit
    from latscope.gateway.metrics import GatewayMetrics

    admission = Admission(WaitQueue("sjf"), FixedLimit(1), 16, GatewayMetrics())
    assert admission.try_now()
    counting = asyncio.Event()

    async def slow_cost() -> float:
        counting.set()
        await asyncio.sleep(30)  # a /tokenize stuck behind a busy server
        return 99.0

    task = asyncio.create_task(admission.wait(slow_cost, estimate=40.0))
    await counting.wait()
    admission.release(0.0)
    cost = await asyncio.wait_for(task, timeout=2)
    assert cost == 40.0  # the estimate it was ordered by
    assert admission.inflight == 1 and len(admission.queue) == 0


async def test_the_count_reorders_the_queue_when_it_comes_first():
    import asyncio

    from latscope.gateway.admission import Admission
    from latscope.gateway.limit import FixedLimit
    from latscope.gateway.metrics import GatewayMetrics

    admission = Admission(WaitQueue("sjf", rate=100.0), FixedLimit(1), 16, GatewayMetrics())
    assert admission.try_now()
    order: list[str] = []

    async def request(name: str, estimate: float, exact: float) -> None:
        async def count() -> float:
            return exact
        await admission.wait(count, estimate=estimate)
        order.append(name)
        await asyncio.sleep(0.01)
        admission.release(exact)

    async def until_queued(count: int, total_cost: float) -> None:
        """Both waiters queued and their counts in: the state the release must find (fixed
        0.01 s sleeps stood here)."""
        async with asyncio.timeout(5):
            while len(admission.queue) != count or admission.queue.total_cost() != total_cost:
                await asyncio.sleep(0)

    # the first looks short by its text, and is long by its tokens: the count puts it last
    first = asyncio.create_task(request("long", 10.0, 5000.0))
    await until_queued(1, 5000.0)
    second = asyncio.create_task(request("short", 20.0, 20.0))
    await until_queued(2, 5020.0)
    admission.release(0.0)
    await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
    assert order == ["short", "long"]
