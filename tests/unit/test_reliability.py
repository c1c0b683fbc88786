"""One table of the client's reliability thresholds (``latscope.reliability``): bench's warnings
and diagnose's judgement read the same rows, each at its own level."""

from __future__ import annotations

from latscope.load.summary import client_warnings
from latscope.reliability import CLIENT_THRESHOLDS, Threshold, judge_client
from latscope.runfiles import summary_of

SUMMARY = {"ttft_ms": {"p50": 50.0}}
# what else every summary.json holds, for the typed reader
REST = {"requests": {"total": 1, "completed": 1, "failed": 0},
        "throughput": {"requests_per_s": 1.0, "output_tokens_per_s": 1.0,
                       "total_tokens_per_s": 2.0, "window_s": 1.0, "window": "given",
                       "overall": {"requests_per_s": 1.0, "output_tokens_per_s": 1.0,
                                   "total_tokens_per_s": 2.0, "window_s": 1.0,
                                   "window": "given"}},
        "tokens": {"input_total": 1, "output_total": 1}}


def judge(summary: dict, **kw):
    return judge_client(summary_of({**REST, **summary}), **kw)


def _off_cpu(share: float) -> dict:
    return {"run_queue_wait_s": share * 10.0, "wall_s": 10.0}


def test_off_cpu_warns_from_its_warn_level_and_is_unreliable_from_the_other():
    assert not client_warnings(_off_cpu(0.04), SUMMARY)
    assert client_warnings(_off_cpu(0.10), SUMMARY)  # a warning ...
    assert judge({"client": _off_cpu(0.10), **SUMMARY}).reliable  # ... not unreliable
    assert not judge({"client": _off_cpu(0.30), **SUMMARY}).reliable


def test_both_readers_follow_the_one_table(monkeypatch):
    # move the row: bench and diagnose move with it (no second copy of the numbers anywhere)
    monkeypatch.setitem(CLIENT_THRESHOLDS, "off_cpu_share", Threshold(0.5, 0.6, "test"))
    assert not client_warnings(_off_cpu(0.30), SUMMARY)
    assert judge({"client": _off_cpu(0.30), **SUMMARY}).reliable
    assert client_warnings(_off_cpu(0.55), SUMMARY)
    assert not judge({"client": _off_cpu(0.65), **SUMMARY}).reliable


def test_the_clients_own_share_of_ttft_and_its_lag_tail_judge_the_run():
    late = judge(SUMMARY, client_ms=6.0, ttft_mean_ms=50.0)
    assert not late.reliable and "12% of mean TTFT" in late.why
    assert judge(SUMMARY, client_ms=4.0, ttft_mean_ms=50.0).reliable
    lag = judge({"client": {"loop_lag_ms": {"p99": 60.0}}, **SUMMARY})
    assert not lag.reliable and "event-loop lag p99 60.0 ms" in lag.why
    assert lag.fix and lag.section().reliable is False
