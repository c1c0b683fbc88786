"""A fast server's responses are parsed without the unparsed backlog growing past its bound."""

from __future__ import annotations

import latscope.load.inflight as inflight
import latscope.load.runner as runner
from fakeserver import FakeServer
from latscope.load import BenchConfig, run_bench

_RESPONSE_BYTES = 34 << 10  # a 256-token response of the fake server is ~33.8 KB


def _against_a_zero_delay_server(tmp_path, requests: int, **config) -> tuple[dict, dict]:
    """(summary, its client figures) of a run of 256-token responses from a fake server that
    streams at full speed."""
    with FakeServer(ttft_ms=0, itl_ms=0) as srv:
        bench = BenchConfig(url=srv.url, model="fake-model", num_requests=requests,
                            output_dir=tmp_path / "run", **config)
        bench.workload.output_len = "256"
        summary = run_bench(bench).summary
    assert summary["requests"]["completed"] == requests
    assert summary["tokens"]["output_total"] == requests * 256
    return summary, summary["client"]


def test_a_zero_delay_stream_keeps_the_unparsed_backlog_bounded(tmp_path, monkeypatch):
    bound = 256 << 10  # small, so that a 2-core box's client surely falls behind the server
    monkeypatch.setattr(inflight, "_FINALIZE_BACKLOG_BYTES", bound)
    _, client = _against_a_zero_delay_server(tmp_path, 640, concurrency=32, warmup=32)
    # the bound, plus at most one response per slot that ended while the others waited
    assert 0 < client["unparsed_peak_bytes"] <= bound + 32 * _RESPONSE_BYTES
    assert client["backpressure_waits"] > 0  # the slots waited instead of the loop parsing it all


def test_an_open_loop_never_waits_and_parses_as_responses_end_past_its_bound(tmp_path,
                                                                           monkeypatch):
    # An open loop's sends follow its schedule: past the closed loops' bound it keeps sending,
    # and past its own the responses are parsed as they end, so its queue stays bounded too.
    monkeypatch.setattr(inflight, "_FINALIZE_BACKLOG_BYTES", 64 << 10)
    monkeypatch.setattr(inflight, "_FINALIZE_OPEN_LOOP_BYTES", 256 << 10)
    _, client = _against_a_zero_delay_server(tmp_path, 400, rate=4000.0, concurrency=64)
    assert client["backpressure_waits"] == 0, client
    # past the closed loops' bound, within the open loop's plus the response that crossed it
    assert 64 << 10 < client["unparsed_peak_bytes"] <= (256 << 10) + _RESPONSE_BYTES


def _stub_run(tmp_path, monkeypatch, log: list[tuple[str, int]]):
    """A ``_Run`` whose client answers every request one loop turn after it was sent (no
    sockets), and whose parser notes what it parsed: the order of sends and parses is then the
    scheduler's alone."""
    import asyncio

    from latscope.load.workload import WordTokenizer, WorkloadSpec, build_workload

    config = BenchConfig(url="http://127.0.0.1:9", model="m", num_requests=8, concurrency=1,
                         output_dir=tmp_path / "run")
    workload = build_workload(WorkloadSpec(input_len="4", output_len="4"), 8, WordTokenizer(), 0)
    run = runner._Run(config, "http://127.0.0.1:9", {}, "m", workload, None)

    class Answered:
        size = 34 << 10

    async def execute(body, record):
        log.append(("send", record.index))
        record.sent_ns = record.scheduled_ns
        await asyncio.sleep(0)  # the response ends one loop turn later
        return Answered()

    def parse(record, exchange, stream):
        log.append(("parse", record.index))
        record.error_kind = "cancelled"  # any outcome: only the order is under test

    monkeypatch.setattr(run.client, "execute", execute)
    monkeypatch.setattr(inflight, "finalize", parse)
    return run


def test_a_slot_sends_its_next_request_before_the_last_response_is_parsed(tmp_path, monkeypatch):
    # The parse of a finished response is queued, never done on the slot's way to its next send:
    # a slot that waited for parsing would leave the server idle at the client's cost.
    import asyncio

    log: list[tuple[str, int]] = []
    run = _stub_run(tmp_path, monkeypatch, log)
    asyncio.run(run.closed_loop(range(8), 1, warmup=False))
    run.writer.close()
    assert sorted(i for what, i in log if what == "parse") == list(range(8))
    for i in range(7):  # request i+1 left before response i was parsed
        assert log.index(("send", i + 1)) < log.index(("parse", i))
    assert run.backpressure_waits == 0  # 8 x 34 KB is far below the bound


def test_a_deep_backlog_is_parsed_a_slice_per_loop_turn_at_least_one_response_each(
        tmp_path, monkeypatch):
    import asyncio

    log: list[tuple[str, int]] = []
    run = _stub_run(tmp_path, monkeypatch, log)
    monkeypatch.setattr(inflight, "_FINALIZE_SLICE_NS", 0)  # the slice is over at once

    async def drain_turns() -> int:
        for index in range(6):
            record = runner.RequestRecord(index=index, request_id=str(index), scheduled_ns=0)
            run.to_finalize.append((record, type("X", (), {"size": 10})()))
            run.backlog_bytes += 10
        run.finalizing = True
        asyncio.get_running_loop().call_soon(run._finalize_one)
        turns = 0
        while run.to_finalize:
            turns += 1
            await asyncio.sleep(0)
        return turns

    turns = asyncio.run(drain_turns())
    run.writer.close()
    assert [i for _, i in log] == list(range(6))  # in order, every one
    assert turns == 6  # one response per turn: the loop's other callbacks run in between
    assert run.drained.is_set() and not run.finalizing


def _bench_bounded(tmp_path, requests: int, concurrency: int, output_len: str,
                   **kw) -> BaseException | None:
    """A run against a zero-delay server in a thread of its own, given 120 s: what it raised
    (None: it ended well, or hung, which the caller's assertion then names)."""
    import threading

    outcome: list[BaseException | None] = []

    def run() -> None:
        with FakeServer(ttft_ms=0, itl_ms=0) as srv:
            config = BenchConfig(url=srv.url, model="fake-model", num_requests=requests,
                                 concurrency=concurrency, output_dir=tmp_path / "run")
            config.workload.output_len = output_len
            try:
                run_bench(config, **kw)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
                outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(120)
    return outcome[0] if outcome else None


def test_a_response_the_reader_fails_on_stops_the_run_with_its_cause_and_keeps_the_rest(
        tmp_path, monkeypatch):
    # A reader's bug used to be logged by the event loop and leave the queue undrained: the
    # slots waiting on it waited for ever. Now the run stops with a one-line cause, the
    # response is written as an error and every record read before it is on disk.
    from latscope.errors import LatscopeError
    from latscope.load import read_run

    read = inflight.finalize
    parsed: list[int] = []

    def flaky(record, exchange, stream):
        if not record.warmup and len(parsed) == 20:  # the 21st measured response
            raise ValueError("a reader bug")
        if not record.warmup:  # (the stagger's ramp is warm-up)
            parsed.append(record.index)
        read(record, exchange, stream)

    monkeypatch.setattr(inflight, "_FINALIZE_BACKLOG_BYTES", 64 << 10)  # slots wait on it
    monkeypatch.setattr(inflight, "finalize", flaky)
    outcome = _bench_bounded(tmp_path, 400, 16, "256")
    assert isinstance(outcome, LatscopeError), "the run hung or did not stop"
    assert "a latscope bug (ValueError: a reader bug)" in str(outcome)
    assert "\n" not in str(outcome)
    _, records, summary = read_run(tmp_path / "run")
    failed = [r for r in records if r.error and "could not read" in r.error]
    assert len(failed) >= 1 and failed[0].error_kind == "malformed_response"
    assert sum(r.ok for r in records) >= 20  # those read before it, kept
    assert summary["requests"]["completed"] + summary["requests"]["failed"] + \
        summary["requests"]["warmup_excluded"] == len(records)  # (the stagger's ramp: warm-up)


def test_the_gate_the_slots_wait_on_opens_for_every_waiter_and_survives_a_cancelled_one():
    # inflight.Gate stands in for asyncio.Event on the hot path (its wait looks the loop up
    # once): the same set / clear / wait, including a waiter cancelled while it waits
    import asyncio

    async def scenario() -> list[str]:
        gate, woke = inflight.Gate(), []

        async def waiter(name: str) -> None:
            await gate.wait()
            woke.append(name)

        tasks = [asyncio.create_task(waiter(n)) for n in ("a", "b", "c")]
        await asyncio.sleep(0)
        assert not gate.is_set() and woke == []  # closed: all three wait
        tasks[1].cancel()
        await asyncio.sleep(0)
        gate.set()  # opens for the two still waiting; the cancelled one is skipped
        await asyncio.wait_for(asyncio.gather(tasks[0], tasks[2]), 10)  # (a gate that never
        # opens fails here, not by hanging)
        assert tasks[1].cancelled()
        await asyncio.wait_for(gate.wait(), 10)  # open: returns at once
        woke.append("open")
        gate.clear()
        late = asyncio.create_task(waiter("d"))
        await asyncio.sleep(0)
        assert not late.done()  # closed again: it waits for the next set
        gate.set()
        await asyncio.wait_for(late, 10)
        return woke

    assert asyncio.run(scenario()) == ["a", "c", "open", "d"]


def test_a_callers_on_record_that_raises_stops_the_run_with_it_and_keeps_the_rest(tmp_path):
    # on_record runs inside the queue's loop callback: its error was only logged by the loop,
    # which left the queue undrained and the slots waiting on it for ever (a hang)
    from latscope.load import read_run

    seen: list[int] = []

    def fails_on_the_tenth(record) -> None:
        seen.append(record.index)
        if len(seen) == 10:
            raise RuntimeError("the caller's callback failed")

    outcome = _bench_bounded(tmp_path, 2000, 8, "64", on_record=fails_on_the_tenth)
    assert isinstance(outcome, RuntimeError), "the run hung on its caller's failed callback"
    assert "callback failed" in str(outcome)
    _, records, summary = read_run(tmp_path / "run")
    assert 10 <= len(records) < 2000  # the sends stopped soon after it
    # and the summary was written, the stagger's ramp as warm-up
    assert summary["requests"]["total"] + summary["requests"]["warmup_excluded"] == len(records)
