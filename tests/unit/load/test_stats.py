"""summarize() on hand-built records whose figures follow from the definitions in docs/metrics.md."""

from __future__ import annotations

import numpy as np
import pytest

from latscope.analysis.stats import summarize
from latscope.model import RequestRecord

MS = 1_000_000


def rec(i: int, sched_ms: float, chunks_ms: list[float], tokens: int | None = None,
        **kw) -> RequestRecord:
    chunk_ns = [int(c * MS) for c in chunks_ms]
    return RequestRecord(index=i, request_id=f"r{i}", scheduled_ns=int(sched_ms * MS),
                         sent_ns=int(sched_ms * MS) + MS, first_token_ns=chunk_ns[0],
                         end_ns=chunk_ns[-1] + MS, chunk_ns=chunk_ns, prompt_tokens=10,
                         output_tokens=tokens or len(chunk_ns), output_tokens_source="usage", **kw)


def test_definitions_on_two_requests():
    a = rec(0, 0, [50, 60, 70, 80])  # TTFT 50, gaps 10,10,10, end 81
    b = rec(1, 100, [120, 150])  # TTFT 20, gap 30, end 151
    s = summarize([a, b], percentiles=(50, 100))
    assert s["ttft_ms"]["mean"] == pytest.approx(35.0)
    assert s["ttft_ms"]["min"] == pytest.approx(20.0) and s["ttft_ms"]["max"] == pytest.approx(50)
    # ITL pools every gap of every request: 10, 10, 10, 30
    assert s["itl_ms"]["count"] == 4 and s["itl_ms"]["mean"] == pytest.approx(15.0)
    assert s["itl_ms"]["p50"] == pytest.approx(10.0)
    # TPOT per request: (end - first) / (tokens - 1) = 31/3 and 31/1
    assert s["tpot_ms"]["mean"] == pytest.approx((31 / 3 + 31) / 2)
    assert (s["e2e_ms"]["min"], s["e2e_ms"]["max"]) == (pytest.approx(51.0), pytest.approx(81.0))
    assert s["send_lag_ms"]["mean"] == pytest.approx(1.0)
    # the window is first scheduled (0) to last end (151 ms)
    assert s["duration_s"] == pytest.approx(0.151)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(6 / 0.151)
    assert s["throughput"]["total_tokens_per_s"] == pytest.approx(26 / 0.151)


def test_percentiles_follow_numpy_linear_interpolation():
    records = [rec(i, 0, [float(v)]) for i, v in enumerate([5, 1, 9, 3, 7, 100])]
    s = summarize(records, percentiles=(50, 90, 99.9))
    values = [5, 1, 9, 3, 7, 100]
    for p in (50, 90, 99.9):
        assert s["ttft_ms"][f"p{p:g}"] == pytest.approx(np.percentile(values, p))
    assert s["ttft_ms"]["std"] == pytest.approx(np.std(values))


def test_failed_and_warmup_requests_stay_out_of_latency():
    ok = rec(0, 0, [40, 50])
    warm = rec(1, 0, [4000, 5000], warmup=True)
    failed = rec(2, 0, [1, 2], error_kind="http_5xx")
    timeout = RequestRecord(index=3, request_id="r3", scheduled_ns=0, error_kind="timeout")
    s = summarize([ok, warm, failed, timeout])
    assert s["ttft_ms"]["count"] == 1 and s["ttft_ms"]["max"] == pytest.approx(40)
    assert s["requests"] == {"total": 3, "completed": 1, "failed": 2, "warmup_excluded": 1}
    assert s["errors"] == {"http_5xx": 1, "timeout": 1}


def test_goodput_counts_requests_meeting_every_slo():
    fast = rec(0, 0, [10, 20, 30])  # TTFT 10, TPOT (31-10)/2 = 10.5
    slow_first = rec(1, 0, [300, 310])  # TTFT 300
    slow_tokens = rec(2, 0, [10, 100])  # TPOT 91
    s = summarize([fast, slow_first, slow_tokens], slo={"ttft": 100, "tpot": 50},
                  duration_s=2.0)
    assert s["goodput"]["good_requests"] == 1
    assert s["goodput"]["requests_per_s"] == pytest.approx(0.5)
    assert s["goodput"]["attainment"] == pytest.approx(1 / 3)


def test_empty_input_gives_none_not_errors():
    s = summarize([])
    assert s["ttft_ms"]["count"] == 0 and s["ttft_ms"]["p50"] is None
    assert s["throughput"]["requests_per_s"] is None


def test_send_lag_warning_does_not_depend_on_the_requested_percentiles():
    # --percentiles 50,90 once removed p99 from the summary, and with it the send-lag warning
    import asyncio

    from latscope.load.runner import _Run

    run = object.__new__(_Run)
    run.records = [rec(i, 0, [100, 110]) for i in range(99)]
    late = rec(99, 0, [100, 110])
    late.sent_ns = late.scheduled_ns + 500 * MS  # one request left 500 ms late
    run.records.append(late)
    run.lag_ms, run.cpu_s, run.wall_s = [0.1], 0.1, 1.0
    summary = summarize(run.records, percentiles=(50, 90))

    async def figures():
        return run._client_figures(summary)

    warnings = asyncio.run(figures())["warnings"]
    assert any(w.startswith("send lag p99") for w in warnings)
