"""summarize() on hand-built records whose figures follow from the definitions in docs/metrics.md."""

from __future__ import annotations

import numpy as np
import pytest
from merged import assert_merged_summary

from latscope.model import RequestRecord
from latscope.stats import ITL_EXACT_MAX, RunStats, e2e_ms, summarize, ttft_ms

MS = 1_000_000


def rec(i: int, sched_ms: float, chunks_ms: list[float], tokens: int | None = None,
        lag_ms: float = 1.0, open_loop: bool = True, **kw) -> RequestRecord:
    """A record sent ``lag_ms`` after its schedule; open loop unless told (latency from the
    schedule, so the figures below read straight off the arguments)."""
    chunk_ns = [int(c * MS) for c in chunks_ms]
    return RequestRecord(index=i, request_id=f"r{i}", scheduled_ns=int(sched_ms * MS),
                         sent_ns=int((sched_ms + lag_ms) * MS), first_token_ns=chunk_ns[0],
                         end_ns=chunk_ns[-1] + MS, chunk_ns=chunk_ns, prompt_tokens=10,
                         output_tokens=tokens or len(chunk_ns), output_tokens_source="usage",
                         open_loop=open_loop, **kw)


def test_closed_loop_times_from_the_send_open_loop_from_the_schedule():
    # the same timestamps: scheduled at 0, sent 30 ms late (a first-wave burst), first chunk at
    # 80, end at 91. Closed loop: the client's 30 ms is not the server's, TTFT 50, E2E 61;
    # open loop: the schedule is the truth (coordinated omission), TTFT 80, E2E 91.
    closed = rec(0, 0, [80, 90], lag_ms=30, open_loop=False)
    opened = rec(1, 0, [80, 90], lag_ms=30, open_loop=True)
    assert (ttft_ms(closed), e2e_ms(closed)) == (pytest.approx(50), pytest.approx(61))
    assert (ttft_ms(opened), e2e_ms(opened)) == (pytest.approx(80), pytest.approx(91))
    s = summarize([closed])
    assert s["latency_origin"] == "sent" and s["ttft_ms"]["p50"] == pytest.approx(50)
    assert s["send_lag_ms"]["p50"] == pytest.approx(30)  # reported beside, not hidden
    # the rate window starts at the first send, not at the first wave's common schedule
    assert s["duration_s"] == pytest.approx(0.061)
    assert summarize([opened])["latency_origin"] == "scheduled"


def test_itl_folds_into_a_histogram_past_its_cap_with_stated_error():
    rng = np.random.default_rng(3)
    records = [rec(i, 0, list(np.cumsum(rng.exponential(10, 64)) + 50)) for i in range(40)]
    exact = RunStats((50, 90, 99))
    folded = RunStats((50, 90, 99), itl_cap=500)  # 40 x 63 gaps: folds after 7 requests
    for r in records:
        exact.add(r)
        folded.add(r)
    a, b = exact.summary()["itl_ms"], folded.summary()["itl_ms"]
    assert "percentile_rel_error" not in a and b["percentile_rel_error"] == pytest.approx(0.001)
    assert b["count"] == a["count"] == 40 * 63
    for key in ("mean", "std", "min", "max"):
        assert b[key] == pytest.approx(a[key], rel=1e-5)
    for key in ("p50", "p90", "p99"):  # the histogram's bin: within its stated error
        assert b[key] == pytest.approx(a[key], rel=2.5e-3, abs=1e-4)


def test_itl_store_stays_bounded_and_percentiles_within_stated_error_past_the_cap():
    # the default cap, crossed: 1200 requests of 256 chunks (306k gaps, 4.7x ITL_EXACT_MAX) with
    # log-normal gaps (a long right tail, like a decode stalled by prefills)
    rng = np.random.default_rng(7)
    gaps = [rng.lognormal(np.log(8), 0.6, 255) for _ in range(1200)]
    stats = RunStats((1, 50, 90, 99, 99.9))
    held = []
    for i, g in enumerate(gaps):
        stats.add(rec(i, 0, list(np.concatenate([[50.0], 50 + np.cumsum(g)]))))
        held.append(stats.itl.nbytes())
    # past the cap: at most the cap's float32 gaps waiting plus the histogram, whatever the count
    # (~1 KB more a request before: 255 gaps x 4 B)
    bound = ITL_EXACT_MAX * 4 + 128 * 1024
    assert max(held) <= bound < len(gaps) * 255 * 4
    pooled = np.concatenate(gaps)
    got = stats.summary()["itl_ms"]
    assert got["count"] == pooled.size > 4 * ITL_EXACT_MAX
    stated = got["percentile_rel_error"]
    for p in (1, 50, 90, 99, 99.9):
        want = float(np.percentile(pooled, p))
        assert abs(got[f"p{p:g}"] - want) <= want * stated * 1.01  # float32/ns rounding slack
    assert got["max"] == pytest.approx(pooled.max(), rel=1e-6)


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


@pytest.mark.parametrize("open_loop, where", [(True, "counted in TTFT"),
                                              (False, "not counted in TTFT")])
def test_send_lag_warning_does_not_depend_on_the_requested_percentiles(open_loop, where):
    # --percentiles 50,90 once removed p99 from the summary, and with it the send-lag warning
    from latscope.load.runner import compose_summary

    stats = RunStats((50, 90))
    for i in range(99):
        stats.add(rec(i, 0, [100, 110], open_loop=open_loop))
    stats.add(rec(99, 0, [600, 610], lag_ms=500, open_loop=open_loop))  # one left 500 ms late
    client = {"cpu_s": 0.1, "wall_s": 1.0, "cpu_utilization": 0.1,
              "loop_lag_ms": {"p50": 0.1, "p99": 0.1}}
    summary = compose_summary(stats.summary(), {"rate": 1.0 if open_loop else None}, "m", {},
                              {}, client, stats)
    warnings = summary["client"]["warnings"]
    assert [w for w in warnings if w.startswith("send lag p99") and where in w], warnings


def test_small_send_lag_next_to_a_long_ttft_is_no_warning():
    from latscope.load.runner import client_warnings

    summary = {"ttft_ms": {"p50": 400.0}, "latency_origin": "sent"}
    assert not client_warnings({"send_lag_p99_ms": 3.0}, summary)  # under 5 ms and 10%
    assert client_warnings({"send_lag_p99_ms": 3.0}, {"ttft_ms": {"p50": 20.0}})  # 15% of it


@pytest.mark.parametrize("cap", [ITL_EXACT_MAX, 300, 50])
def test_itl_gaps_kept_in_c_equal_numpys(cap):
    # the C store (latscope/_native.c GapStore) and its pure-Python twin (numpy's itls_ms) must
    # keep the same values, bit for bit, and the same count, sums and extremes; past a small
    # cap, the same histogram; past a cap smaller than one request, that request folded at once
    from latscope import native, stats, twins
    from latscope.itlpool import ItlPool

    if native.C is None:
        pytest.skip("the C part is not built (tests/unit/test_native.py says why)")
    rng = np.random.default_rng(7)
    requests = [list(np.cumsum(rng.integers(0, 50_000_000, size=n)) + 10**15)
                for n in rng.integers(0, 120, size=40)]
    requests = [[int(t) for t in times] for times in requests]
    requests[5] = [requests[5][0]] * 30 + requests[5]  # one read's tokens: zero gaps
    fast, slow = ItlPool(cap, "c"), ItlPool(cap, "python")
    assert type(fast.store) is not type(slow.store)
    for i, times in enumerate(requests):
        if i % 3:
            fast.add_times(times)
        else:  # as a line read back gives them: its gaps' tuple
            gaps = twins.gaps_of(times)
            if gaps is not None:
                fast.add_gaps(gaps)
        slow.extend(stats.itls_ms(RequestRecord(index=0, request_id="x", scheduled_ns=0,
                                                chunk_ns=times)))
    want = sum(max(len(t) - 1, 0) for t in requests)
    assert fast.store.count == slow.store.count == want
    assert fast.store.values() == slow.store.values()
    assert (fast.store.lo, fast.store.hi) == (slow.store.lo, slow.store.hi)
    assert fast.store.total == pytest.approx(slow.store.total, rel=1e-12)
    assert fast.store.total_sq == pytest.approx(slow.store.total_sq, rel=1e-12)
    if cap < ITL_EXACT_MAX:  # folded: the same histogram
        assert fast.hist is not None and np.array_equal(fast.hist, slow.hist)
        assert fast.zeros == slow.zeros >= 30
    else:
        assert fast.hist is None and fast.store.kept == want
    assert fast.distribution((50, 99)) == pytest.approx(slow.distribution((50, 99)), rel=1e-9)
    assert fast.nbytes() <= cap * 4 + (0 if fast.hist is None else fast.hist.nbytes)


def test_the_gap_store_refuses_what_passes_its_cap_and_adds_nothing():
    from latscope import native

    for kind in (backend.GapStore for backend in native.BACKENDS.values()):
        store = kind(4)
        assert store.add_times([10, 10, 2_000_010]) and store.kept == 2
        assert store.add_times([5]) and store.count == 2  # one time: no gap
        assert not store.add_times([0, 1, 2, 3])  # 3 more would make 5 > 4
        assert (store.kept, store.count, store.lo, store.hi) == (2, 2, 0.0, 2.0)
        assert np.frombuffer(store.values(), dtype=np.float32).tolist() == [0.0, 2.0]
        store.clear()
        assert store.kept == 0 and store.count == 2 and store.values() == b""
        store.add_sums(3, 9.0, 27.0, 1.0, 5.0)  # folded elsewhere: counted, not kept
        assert (store.kept, store.count, store.total, store.hi) == (0, 5, 11.0, 5.0)
    if native.C is not None:
        with pytest.raises(TypeError):  # not a list (the C loop reads list items)
            native.C.GapStore(4).add_times((1, 2))
        with pytest.raises(TypeError):  # not the gaps' tuple
            native.C.GapStore(4).add_gaps([b"", 0.0, 0.0, 0.0, 0.0])
        with pytest.raises(OverflowError):  # past 64 bits: an error, nothing kept
            bad = native.C.GapStore(4)
            bad.add_times([1, 2**70])
        assert bad.kept == bad.count == 0


def test_a_busy_client_without_the_c_pass_is_told_how_to_get_it():
    from latscope.load.summary import client_warnings

    summary = {"ttft_ms": {"p50": 50.0}}
    busy = {"cpu_utilization": 0.97}
    assert len(client_warnings({**busy, "stream_parser": "c"}, summary)) == 1
    warnings = client_warnings({**busy, "stream_parser": "python"}, summary)
    assert len(warnings) == 2 and "C compiler" in warnings[1]
    # an idle client is not told: the parser did not matter to its figures
    assert not client_warnings({"cpu_utilization": 0.3, "stream_parser": "python"}, summary)


def test_the_run_statistics_keep_the_one_definition_of_each_latency():
    # RunStats.add writes origin_ns / send_lag_ms / ttft_ms / tpot_ms / e2e_ms out inline (the
    # calls cost ~0.7 us a record at the client's ceiling): its columns must be theirs, for
    # open and closed loops, a record never sent (sent_ns 0), one token, no first token
    from latscope import stats

    records = []
    for i, (open_loop, lag, chunks, tokens) in enumerate([
            (True, 2.0, [30.0, 40.0, 55.0], 3), (False, 2.0, [30.0, 40.0, 55.0], 3),
            (False, 0.0, [12.0], 1), (True, 5.0, [20.0, 21.0], None),
            (False, 1.5, [9.0, 10.0, 17.0, 18.0], 4)]):
        records.append(rec(i, 10.0 * i, [10.0 * i + c for c in chunks], tokens, lag,
                           open_loop))
    records[2].sent_ns = 0  # never sent: the latency counts from the schedule, no send lag
    no_first = rec(9, 100.0, [130.0], 1, 1.0, False)
    no_first.first_token_ns = None
    records.append(no_first)
    run = RunStats()
    for r in records:
        run.add(r)
    for metric, fn in (("ttft", stats.ttft_ms), ("tpot", stats.tpot_ms), ("e2e", stats.e2e_ms),
                       ("send_lag", stats.send_lag_ms)):
        expected = [v for r in records if (v := fn(r)) is not None]
        assert run.values_ms(metric).tolist() == pytest.approx(expected, rel=1e-6), metric
    assert run.first_ns == min(stats.origin_ns(r) for r in records)
    assert dict(run.loops) == {"scheduled": 2, "sent": 4}


@pytest.mark.parametrize("cap", [ITL_EXACT_MAX, 700, 40])
@pytest.mark.parametrize("backend", ["c", "python"])
@pytest.mark.parametrize("deal", ["random", "by time"])
def test_workers_statistics_merged_are_the_runs(cap, backend, deal):
    # a run's records dealt to three "workers" (at random, or early / middle / late: a worker
    # whose completions wait for a later worker's sends to settle), each counting its own on
    # its own clock (shifted), merged on the driver's: the summary one process counting every
    # record gives, whether the ITL values stay exact, fold in one worker, or fold only once
    # merged; failures, warm-up, a goodput SLO and the steady window's pending completions
    import pickle

    from latscope import native
    from latscope.itlpool import ItlPool

    if backend not in native.BACKENDS:
        pytest.skip("the C part is not built")
    rng = np.random.default_rng(11)
    records = []
    for i in range(150):
        start = float(rng.uniform(0, 400))
        chunks = list(start + 5 + np.cumsum(rng.exponential(3, int(rng.integers(1, 30)))))
        r = rec(i, start, chunks, open_loop=bool(i % 2), warmup=i < 6)
        if i % 17 == 3:
            r.error_kind, r.error, r.end_ns = "http_5xx", f"HTTP 500 number {i}", None
        records.append(r)
    slo = {"ttft": 9.0, "itl": 8.0}
    one = RunStats((50, 90, 99), slo, itl_cap=cap)
    for r in records:
        one.add(r)
    offsets = [0, 7 * MS, -123 * MS]  # worker clock = driver clock + offset
    workers = [RunStats((50, 90, 99), slo, itl_cap=cap) for _ in offsets]
    for w in workers:
        w.itl = ItlPool(cap, backend)
    dealt = (rng.integers(0, 3, len(records)) if deal == "random"
             else [min(int(r.scheduled_ns / MS // 134), 2) for r in records])
    for r, k in zip(records, dealt):
        shifted = RequestRecord.from_dict(r.to_dict())
        for name in ("scheduled_ns", "sent_ns", "first_token_ns", "end_ns"):
            if getattr(shifted, name):
                setattr(shifted, name, getattr(shifted, name) + offsets[k])
        shifted.chunk_ns = [t + offsets[k] for t in shifted.chunk_ns]
        workers[k].add(shifted)
    merged = RunStats((50, 90, 99), slo, itl_cap=cap)
    for w, offset in zip(workers, offsets):
        merged.merge(pickle.loads(pickle.dumps(w)), offset)  # as a worker sends them
    got, want = merged.summary(), one.summary()
    assert_merged_summary(got, want)
    assert got["error_examples"]["http_5xx"] in {r.error for r in records if r.error}
    assert want["requests"]["failed"] > 0 and want["requests"]["warmup_excluded"] == 6
    assert ("percentile_rel_error" in want["itl_ms"]) == (cap < 2000)
    assert merged.steady.settled == one.steady.settled
    assert sorted(merged.steady.pending) == sorted(one.steady.pending)


def test_a_pickled_itl_store_keeps_its_values_sums_and_histogram():
    from latscope import native
    from latscope.itlpool import ItlPool

    rng = np.random.default_rng(5)
    for backend in native.BACKENDS:
        pooled = ItlPool(50, backend)
        for _ in range(7):
            pooled.add_times([int(t) for t in np.cumsum(rng.integers(1, 10**7, 20))])
        import pickle
        back = pickle.loads(pickle.dumps(pooled))
        assert type(back.store) is type(pooled.store)
        assert back.store.values() == pooled.store.values()
        assert (back.store.count, back.store.kept, back.store.total, back.store.total_sq,
                back.store.lo, back.store.hi) == (pooled.store.count, pooled.store.kept,
                                                  pooled.store.total, pooled.store.total_sq,
                                                  pooled.store.lo, pooled.store.hi)
        assert np.array_equal(back.hist, pooled.hist) and back.zeros == pooled.zeros
        assert back.distribution((50, 99)) == pooled.distribution((50, 99))


def _mixed_records(seed: int, n: int = 300) -> list[RequestRecord]:
    """A run's records in completion order: mostly usual ones, with warm-up, failures, one
    token, no first token, never sent, no prompt count, counted tokens, open and closed loops."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        start = float(rng.uniform(0, 400))
        chunks = list(start + 5 + np.cumsum(rng.exponential(3, int(rng.integers(1, 30)))))
        r = rec(i, start, chunks, open_loop=bool(rng.integers(0, 2)), warmup=i < 8,
                lag_ms=float(rng.uniform(0, 3)))
        kind = int(rng.integers(0, 20))
        if kind == 0:
            r.error_kind, r.error, r.end_ns = "http_5xx", f"HTTP 500 number {i}", None
        elif kind == 1:
            r.first_token_ns = None
        elif kind == 2:
            r.sent_ns = 0
        elif kind == 3:
            r.prompt_tokens = None
        elif kind == 4:
            r.output_tokens_source = "counted"
        records.append(r)
    records.sort(key=lambda r: r.end_ns or 0)
    return records


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("batch", [1, 7, 512])
def test_batched_statistics_are_the_one_by_one_ones_bit_for_bit(seed, batch, monkeypatch):
    # usual records are folded by numpy a batch at a time; every figure must be what adding
    # each in turn gives: the same columns in the same order, counts, window, tokens, summary
    import pickle

    records = _mixed_records(seed)
    monkeypatch.setattr(RunStats, "_BATCH", batch)
    batched = RunStats((50, 90, 99))
    for i, r in enumerate(records):
        batched.add(r)
        if i == 150:  # a worker's statistics pickled with records still batched
            batched = pickle.loads(pickle.dumps(batched))
    monkeypatch.setattr(RunStats, "_FAST", False)
    one_by_one = RunStats((50, 90, 99))
    for r in records:
        one_by_one.add(r)
    assert batched.summary() == one_by_one.summary()
    for metric in RunStats._METRICS:
        assert batched.cols[metric].tobytes() == one_by_one.cols[metric].tobytes(), metric
    for name in ("total", "completed", "warmup", "first_ns", "last_ns", "out_tokens",
                 "in_tokens", "loops", "output_source"):
        assert getattr(batched, name) == getattr(one_by_one, name), name
    assert batched.steady.settled == one_by_one.steady.settled
    assert batched.steady.first == one_by_one.steady.first
    assert batched.steady.last == one_by_one.steady.last
    assert sorted(batched.steady.pending) == sorted(one_by_one.steady.pending)
    assert batched.summary()["requests"]["completed"] > 200  # most went the batched way


def test_batched_workers_statistics_merge_to_the_runs():
    import pickle

    records = _mixed_records(3)
    one = RunStats((50, 90, 99))
    for r in records:
        one.add(r)
    workers = [RunStats((50, 90, 99)) for _ in range(3)]
    for i, r in enumerate(records):
        workers[i % 3].add(r)
    merged = RunStats((50, 90, 99))
    for w in workers:  # each sent mid-batch, as a worker's end finds it
        merged.merge(pickle.loads(pickle.dumps(w)))
    assert_merged_summary(merged.summary(), one.summary())
    assert merged.steady.settled == one.steady.settled
