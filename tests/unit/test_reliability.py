"""One table of the client's reliability thresholds (``latscope.reliability``): bench's warnings
and diagnose's judgement read the same rows, each at its own level."""

from __future__ import annotations

from latscope.load.summary import client_warnings
from latscope.reliability import CLIENT_THRESHOLDS, Threshold, judge_client

SUMMARY = {"ttft_ms": {"p50": 50.0}}


def _off_cpu(share: float) -> dict:
    return {"run_queue_wait_s": share * 10.0, "wall_s": 10.0}


def test_off_cpu_warns_from_its_warn_level_and_is_unreliable_from_the_other():
    assert not client_warnings(_off_cpu(0.04), SUMMARY)
    assert client_warnings(_off_cpu(0.10), SUMMARY)  # a warning ...
    assert judge_client({"client": _off_cpu(0.10), **SUMMARY}).reliable  # ... not unreliable
    assert not judge_client({"client": _off_cpu(0.30), **SUMMARY}).reliable


def test_both_readers_follow_the_one_table(monkeypatch):
    # move the row: bench and diagnose move with it (no second copy of the numbers anywhere)
    monkeypatch.setitem(CLIENT_THRESHOLDS, "off_cpu_share", Threshold(0.5, 0.6, "test"))
    assert not client_warnings(_off_cpu(0.30), SUMMARY)
    assert judge_client({"client": _off_cpu(0.30), **SUMMARY}).reliable
    assert client_warnings(_off_cpu(0.55), SUMMARY)
    assert not judge_client({"client": _off_cpu(0.65), **SUMMARY}).reliable


def test_the_clients_own_share_of_ttft_and_its_lag_tail_judge_the_run():
    late = judge_client(SUMMARY, client_ms=6.0, ttft_mean_ms=50.0)
    assert not late.reliable and "12% of mean TTFT" in late.why
    assert judge_client(SUMMARY, client_ms=4.0, ttft_mean_ms=50.0).reliable
    lag = judge_client({"client": {"loop_lag_ms": {"p99": 60.0}}, **SUMMARY})
    assert not lag.reliable and "event-loop lag p99 60.0 ms" in lag.why
    assert lag.fix and lag.to_dict()["reliable"] is False
