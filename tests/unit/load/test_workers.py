"""bench --workers: the split is exact, the merge loses and duplicates nothing, clocks line up,
and a worker that dies is named while its finished records stay in the run.

The end-to-end cases run real worker processes against the fake server, whose truth timestamps
share CLOCK_MONOTONIC with every process on the host: a merged record whose first token came
before the server wrote it would mean the clock merge is wrong.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fakeserver import FakeServer
from latscope.errors import ConfigError
from latscope.load import BenchConfig, read_run
from latscope.load.arrival import arrival_offsets_ns
from latscope.load.clocks import measure_offset, shift_record
from latscope.load.shares import plan_shares, split_evenly, split_proportionally
from latscope.load.workers import run_workers
from latscope.model import RequestRecord
from latscope.stats import summarize
from merged import assert_merged_summary


@pytest.mark.parametrize("total,parts", [(7, 3), (4096, 16), (3, 3), (0, 2)])
def test_split_evenly_sums_and_differs_by_at_most_one(total, parts):
    out = split_evenly(total, parts)
    assert sum(out) == total and len(out) == parts and max(out) - min(out) <= 1


def test_split_proportionally_follows_weights_and_sums():
    assert split_proportionally(10, [1, 1]) == [5, 5]
    assert split_proportionally(10, [3, 1]) == [8, 2]  # 7.5 / 2.5: a remainder goes to one
    assert sum(split_proportionally(1001, [3, 3, 2])) == 1001


def test_closed_loop_shares_measure_the_requests_once_from_disjoint_indices():
    # each worker measures its part of -n (by its slots) and draws its indices, its stagger
    # ramp's too, from its own stride past the warm-up: no index is sent twice
    config = BenchConfig(url="http://127.0.0.1:1", num_requests=101, concurrency=10, warmup=4)
    shares = plan_shares(config, 3, 105)
    assert [s.concurrency for s in shares] == [4, 3, 3]
    assert [s.size for s in shares] == split_proportionally(101, [4, 3, 3])
    assert sum(s.size or 0 for s in shares) == 101
    firsts = [set(s.indices[:200]) for s in shares]  # (the strides have no end)
    assert all(min(f) >= 4 for f in firsts)
    assert not (firsts[0] & firsts[1] or firsts[0] & firsts[2] or firsts[1] & firsts[2])


def test_closed_loop_duration_shares_are_disjoint():
    config = BenchConfig(url="http://127.0.0.1:1", num_requests=None, duration_s=5, concurrency=4)
    shares = plan_shares(config, 2, 4096)
    a, b = (set(s.indices[:1000]) for s in shares)
    assert not a & b and shares[0].size is None


def test_open_loop_thinning_keeps_the_global_schedule_exactly():
    config = BenchConfig(url="http://127.0.0.1:1", num_requests=500, rate=50.0, seed=3)
    shares = plan_shares(config, 4, 500)
    merged = sorted(zip((o for s in shares for o in s.offsets_ns),
                        (i for s in shares for i in s.indices)))
    expected = arrival_offsets_ns(50.0, 500, seed=3)
    assert [o for o, _ in merged] == sorted(expected.tolist())
    assert sorted(i for _, i in merged) == list(range(500))
    for s in shares:  # each index keeps its own arrival time
        assert all(expected[i] == o for i, o in zip(s.indices, s.offsets_ns))
        assert 60 < len(s.indices) < 190  # thinned at random: about 125 each


def test_too_few_slots_for_the_workers_is_refused():
    config = BenchConfig(url="http://127.0.0.1:1", num_requests=10, concurrency=2)
    with pytest.raises(ConfigError, match="at least one slot"):
        plan_shares(config, 3, 10)


def test_shift_record_moves_every_timestamp():
    rec = RequestRecord(index=0, request_id="x", scheduled_ns=1000, sent_ns=1100,
                        headers_ns=1200, first_token_ns=1300, end_ns=1500,
                        chunk_ns=[1300, 1400])
    shift_record(rec, 100)
    assert (rec.scheduled_ns, rec.sent_ns, rec.headers_ns, rec.first_token_ns, rec.end_ns) == \
        (900, 1000, 1100, 1200, 1400)
    assert rec.chunk_ns == [1200, 1300]


def test_measure_offset_finds_a_known_offset_within_its_bound():
    import time

    true_offset = 5_000_000_000

    def ping() -> int:
        time.sleep(0.0005)  # a one-way delay
        return time.perf_counter_ns() + true_offset

    clock = measure_offset(ping, pings=5)
    assert abs(clock.offset_ns - true_offset) <= clock.bound_ns
    assert 0 < clock.bound_ns < 50_000_000


@pytest.fixture(scope="module")
def server():
    with FakeServer(ttft_ms=20, itl_ms=5) as srv:
        yield srv


def _config(server, tmp_path, **kw) -> BenchConfig:
    config = BenchConfig(url=server.url, model="fake-model", output_dir=tmp_path / "run", **kw)
    config.workload.input_len, config.workload.output_len = "8", "6"
    return config


def _check_merged(result, truth, sent: int) -> None:
    _, records, summary = read_run(result.run_dir)
    measured = [r for r in records if not r.warmup]
    ids = [r.request_id for r in records]
    assert len(ids) == len(set(ids))  # no duplicates
    assert len(measured) == sent  # no loss
    for rec in measured:
        t = truth[rec.request_id]
        assert rec.scheduled_ns <= rec.sent_ns <= t.recv_ns  # causality on one clock
        assert rec.first_token_ns >= t.chunk_ns[0]
    # the merged summary (the workers' statistics merged) is what the same records give in
    # one process
    assert_merged_summary(summary, summarize(records, percentiles=result.config.percentiles))


@pytest.mark.slow
def test_two_workers_closed_loop_merge_everything_once(server, tmp_path, capfd):
    server.reset()
    result = run_workers(_config(server, tmp_path, num_requests=60, concurrency=6, warmup=2), 2)
    _check_merged(result, server.truth(), 60)
    # a worker ends quietly: it once closed its kept-alive connections after its event loop had
    # closed and printed "RuntimeError: Event loop is closed" from each worker process
    assert "Traceback" not in capfd.readouterr().err
    workers = result.summary["workers"]
    assert [w["measured"] for w in workers] == [30, 30]
    # each worker's stagger ramp (its slots starting one after another) on top, as warm-up
    ramps = [sum(loop["ramp_requests"] for loop in w["stagger"]) for w in workers]
    assert [w["requests"] - w["measured"] for w in workers] == ramps and min(ramps) >= 1
    assert result.summary["load"]["ramp_requests_excluded"] == sum(ramps)
    # local workers on the driver's clock append their own lines (the driver writes none)
    assert [w["records_written_by"] for w in workers] == ["worker", "worker"]
    assert len({w["pid"] for w in workers}) == 2 and os.getpid() not in {w["pid"] for w in workers}
    for w in workers:  # each worker's own cost and clock are reported
        assert w["cpu_s"] > 0 and w["loop_lag_ms"]["count"] > 0
        assert w["clock"]["applied_ns"] == 0  # same kernel: one CLOCK_MONOTONIC
        assert abs(w["clock"]["offset_ns"]) <= w["clock"]["bound_ns"]
    assert not result.summary["workers_failed"]


@pytest.mark.slow
def test_two_workers_open_loop_send_the_global_schedule(server, tmp_path):
    server.reset()
    config = _config(server, tmp_path, num_requests=80, rate=100.0, seed=5)
    result = run_workers(config, 2)
    _check_merged(result, server.truth(), 80)
    start = result.manifest["start_ns"]
    scheduled = sorted(r.scheduled_ns - start for r in result.records)
    assert scheduled == sorted(arrival_offsets_ns(100.0, 80, seed=5).tolist())


@pytest.mark.slow
def test_a_worker_that_dies_is_named_and_its_finished_records_kept(server, tmp_path):
    server.reset()
    killed: list[int] = []

    def kill_worker_1(record: RequestRecord) -> None:
        if killed:
            return
        for child in multiprocessing.active_children():
            if child.name == "latscope-bench-worker-1":
                killed.append(child.pid)
                os.kill(child.pid, signal.SIGKILL)  # a process this test's run started

    config = _config(server, tmp_path, num_requests=200, concurrency=4)
    config.workload.output_len = "30"  # ~170 ms a request: the kill lands mid-run
    result = run_workers(config, 2, on_record=kill_worker_1)
    failed = result.summary["workers_failed"]
    assert len(failed) == 1 and "worker 1" in failed[0] and "SIGKILL" in failed[0]
    _, records, summary = read_run(result.run_dir)
    by_worker = {w["worker"]: w for w in summary["workers"]}
    assert by_worker[0]["measured"] == 100 and by_worker[0]["error"] is None
    assert by_worker[1]["measured"] < 100 and by_worker[1]["requests_not_returned"] > 0
    # the driver calls back per record here: the workers' lines come through it
    assert {w["records_written_by"] for w in summary["workers"]} == {"driver"}
    assert len(records) == by_worker[0]["requests"] + by_worker[1]["requests"]
    assert len({r.request_id for r in records}) == len(records)
    assert np.all([r.ok for r in records])
    # the summary counts every record written: the dead worker's statistics never came, its
    # records are counted from requests.jsonl
    again = summarize(records, percentiles=config.percentiles)
    assert summary["requests"] == again["requests"]
    warm = summary["requests"]["warmup_excluded"]  # the stagger ramps: warm-up requests
    assert summary["requests"]["total"] + warm == len(records) and warm >= 1
    assert summary["ttft_ms"]["p50"] == again["ttft_ms"]["p50"]


@pytest.mark.slow
def test_a_callers_on_record_that_raises_stops_a_workers_run_with_its_error(server, tmp_path):
    server.reset()
    seen: list[int] = []

    def fails_on_the_fifth(record: RequestRecord) -> None:
        seen.append(record.index)
        if len(seen) == 5:
            raise RuntimeError("the caller's callback failed")

    config = _config(server, tmp_path, num_requests=400, concurrency=4)
    config.workload.output_len = "30"  # ~170 ms a request: the failure lands mid-run
    with pytest.raises(RuntimeError, match="callback failed"):
        run_workers(config, 2, on_record=fails_on_the_fifth)
    _, records, _ = read_run(tmp_path / "run")
    assert 5 <= len(records) < 400  # what came before it is written; the rest was not sent


def test_auto_workers_follow_the_load_and_the_spare_cores():
    from latscope.load.workers import auto_workers

    closed = lambda c: BenchConfig(url="http://127.0.0.1:1", concurrency=c)  # noqa: E731
    assert auto_workers(closed(64), spare_cores=15) == 1  # one process carries it
    assert auto_workers(closed(1024), spare_cores=15) == 4
    assert auto_workers(closed(4096), spare_cores=15) == 15  # no more than the spare cores
    assert auto_workers(closed(1024), spare_cores=0) == 1  # a busy host: one process
    open_loop = BenchConfig(url="http://127.0.0.1:1", rate=2500.0)
    assert auto_workers(open_loop, spare_cores=15) == 3


def test_workers_honour_duration_against_a_server_that_stalls(tmp_path):
    with FakeServer(ttft_ms=1, itl_ms=1, fail_every=1, fail_mode="stall") as srv:
        config = _config(srv, tmp_path, num_requests=None, concurrency=4)
        config.duration_s = 1.0
        started = time.monotonic()
        result = run_workers(config, 2)
        took = time.monotonic() - started
    # 1 s of load + 1 s of grace, not the 600 s request timeout (starting two worker
    # processes takes tens of seconds on a loaded 2-core box: the bound is loose)
    assert took < 120, took
    s = result.summary
    # each worker's 2 slots: the pilot (its stagger's ramp: warm-up) and one measured request
    assert s["errors"] == {"cancelled": 2} and s["requests"]["completed"] == 0
    assert s["requests"]["warmup_excluded"] == 2
    assert [r.error_kind for r in result.records] == ["cancelled"] * 4  # every one on disk
    assert "after --duration ended" in s["error_examples"]["cancelled"]


@pytest.mark.slow
def test_an_open_loops_warm_up_before_the_workers_is_sent_at_the_rate(server, tmp_path):
    # 20 warm-up requests at 100 req/s by the driver: in flight together, not one at a time
    server.reset()
    config = _config(server, tmp_path, num_requests=40, rate=100.0, seed=5, warmup=20)
    result = run_workers(config, 2)
    _check_merged(result, server.truth(), 40)
    warm = sorted((r for r in result.records if r.warmup), key=lambda r: r.index)
    assert len(warm) == 20 and all(r.open_loop for r in warm)
    scheduled = [r.scheduled_ns - warm[0].scheduled_ns for r in warm]
    assert scheduled == arrival_offsets_ns(100.0, 20, seed=5).tolist()
    assert any(b.sent_ns < a.end_ns for a, b in zip(warm, warm[1:]))


def test_a_workers_batch_is_its_records_requests_jsonl_lines(tmp_path):
    # a worker keeps each finished record's requests.jsonl line (no scratch file, no second
    # serialisation) and hands them over as JSON Lines: the driver reads the records back and,
    # on one host's clock, writes the lines as they came
    import orjson

    from latscope.load.worker import _LinesForTheDriver
    from latscope.rundir import record_line

    lines = _LinesForTheDriver(tmp_path)
    t = 10**13
    records = [RequestRecord(index=i, request_id=f"r-{i}", scheduled_ns=t, sent_ns=t + i,
                             end_ns=t + 50, chunk_ns=[t + 20] * 12 + [t + 50] * 4,
                             output_tokens=16, status=200) for i in range(3)]
    assert lines.take() == b""
    for record in records[:2]:
        lines.append(record)
    first = lines.take()
    lines.append(records[2])
    batch = first + lines.take()
    back = [RequestRecord.from_dict(orjson.loads(line)) for line in batch.splitlines()]
    assert back == records
    assert batch.splitlines(keepends=True) == [record_line(r) for r in back]
    assert lines.take() == b""
    lines.close()
    assert (tmp_path / "requests.jsonl").read_bytes() == b""  # the driver writes the run's file


@pytest.mark.parametrize("backend", ["c", "python"])
def test_a_line_read_without_its_times_is_the_line_read_whole(backend, monkeypatch):
    # a line is read back (a dead worker's, a run rebuilt, the decomposition) with its token
    # times left as text (native.json_gaps reads their gaps): the record is the one decoded
    # whole but for chunk_ns, and the run's statistics come out identical; an unusual line is
    # decoded whole instead
    import orjson

    from latscope import native
    from latscope.rundir import record_line
    from latscope.rundir import record_without_times as read_for_merge
    from latscope.stats import RunStats

    if backend not in native.BACKENDS:
        pytest.skip("the C part is not built")
    monkeypatch.setattr(native, "json_gaps", native.BACKENDS[backend].json_gaps)

    t = 10**13
    records = [
        RequestRecord(index=0, request_id="a", scheduled_ns=t, sent_ns=t + 5, end_ns=t + 9_000_000,
                      first_token_ns=t + 1_000_000, status=200, output_tokens=40,
                      output_tokens_source="usage", prompt_tokens=8,
                      chunk_ns=[t + 1_000_000 + k * 200_000 for k in range(40)]),
        RequestRecord(index=1, request_id="b", scheduled_ns=t, sent_ns=t, end_ns=t + 50,
                      first_token_ns=t + 20, status=200, output_tokens=16, group="long",
                      chunk_ns=[t + 20] * 12 + [t + 50] * 4, server={"metrics": {"x": 1.5}},
                      chunk_tokens=[1] * 16),
        RequestRecord(index=2, request_id="c", scheduled_ns=t, sent_ns=t + 1, status=500,
                      error_kind="http_5xx", error="HTTP 500: boom"),
        RequestRecord(index=3, request_id="d", scheduled_ns=t, sent_ns=t, end_ns=t + 9,
                      first_token_ns=t + 9, status=200, output_tokens=1, chunk_ns=[t + 9]),
        RequestRecord(index=4, request_id="e", scheduled_ns=t, sent_ns=t, end_ns=t + 9,
                      status=200, open_loop=True, trace_id="ab" * 16),
    ]
    whole, light = RunStats(slo={"itl": 0.15, "ttft": 2.0}), RunStats(slo={"itl": 0.15,
                                                                          "ttft": 2.0})
    for record in records:
        line = record_line(record)
        read = read_for_merge(line)
        assert read is not None
        back, gaps = read
        decoded = RequestRecord.from_dict(orjson.loads(line))
        assert back.chunk_ns == [] and back == dataclasses.replace(decoded, chunk_ns=[])
        whole.add(decoded)
        light.add(back, gaps)
    # "a" misses the ITL SLO alone (a 0.2 ms gap): the light read must see its largest gap
    assert light.summary() == whole.summary() and whole.good == light.good == 3
    # times past 18 digits, or an array written another way: decoded whole by the caller
    assert read_for_merge(record_line(dataclasses.replace(records[1], chunk_ns=[10**19] * 9))) \
        is None
    spaced = record_line(records[0]).replace(b'"chunk_gaps_ns":[', b'"chunk_gaps_ns": [')
    assert read_for_merge(spaced) is None


def test_a_lines_index_is_read_off_its_start():
    # a dead worker's records are found in requests.jsonl by their index, read off the line's
    # start (record_line writes it first) without decoding the rest
    from latscope.load.merge import _line_index
    from latscope.rundir import record_line

    for index in (0, 7, 10**12):
        line = record_line(RequestRecord(index=index, request_id="r", scheduled_ns=1,
                                         chunk_ns=[5] * 20))
        assert _line_index(line) == index
    for other in (b'{"request_id":"r","index":3}\n', b'{"index":-1,"x":1}\n', b'{"index":7}\n',
                  b"", b'{"index":,\n'):
        assert _line_index(other) is None


def _workers_bench(url: str, run_dir) -> subprocess.Popen:
    # its own session: a terminal's Ctrl-C goes to the whole process group, workers included
    return subprocess.Popen(
        [sys.executable, "-m", "latscope", "bench", "--url", url, "-n", "5000", "-c", "4",
         "--output-len", "10", "--workers", "2", "--output-dir", str(run_dir), "--no-progress",
         "--scrape-interval", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started, from any of its threads (the workers start from one)."""
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()]


def _wait_for_lines(run_dir, count: int) -> None:
    requests = run_dir / "requests.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (
            not requests.exists() or requests.read_bytes().count(b"\n") < count):
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM to the driver", "Ctrl-C to the group"])
def test_a_stopped_workers_run_keeps_every_workers_records_and_statistics(tmp_path, how):
    # the driver asks its workers to stop: each sends what it finished and its statistics, the
    # summary counts every record written and no worker is reported dead (SIGTERM once left
    # the workers loading the server, with no summary, until their shares ended)
    run_dir = tmp_path / "run"
    with FakeServer(ttft_ms=20, itl_ms=20) as srv:
        proc = _workers_bench(srv.url, run_dir)
        _wait_for_lines(run_dir, 12)
        if how == "SIGTERM to the driver":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)  # the group this test started
        _, err = proc.communicate(timeout=60)
    want = 128 + signal.SIGTERM if how.startswith("SIGTERM") else 130
    assert proc.returncode == want, err
    _, records, summary = read_run(run_dir)
    ramp = summary["load"]["ramp_requests_excluded"]  # warm-up requests: on disk, not counted
    assert summary["requests"]["total"] + ramp == len(records) >= 12
    assert summary["requests"]["warmup_excluded"] == ramp
    assert not summary["workers_failed"]
    assert all(w["error"] is None for w in summary["workers"])
    assert sum(w["requests"] for w in summary["workers"]) == len(records)
    assert summary["errors"].get("cancelled", 0) <= 4  # the ones in flight, written


@pytest.mark.slow
def test_workers_stop_when_their_driver_is_killed(tmp_path):
    # a worker whose driver died (SIGKILL: no chance to stop it) stops loading the server
    with FakeServer(ttft_ms=20, itl_ms=20) as srv:
        proc = _workers_bench(srv.url, tmp_path / "run")
        _wait_for_lines(tmp_path / "run", 8)
        workers = _children(proc.pid)
        assert len(workers) >= 2
        proc.kill()  # the driver this test started
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists()
                                                  for w in workers):
            time.sleep(0.1)
        left = [w for w in workers if Path(f"/proc/{w}").exists()]
        for w in left:  # (a process this test's run started)
            os.kill(w, signal.SIGKILL)
    assert not left, "workers kept running after their driver died"


def test_a_dead_workers_records_are_counted_from_the_file_by_its_share(tmp_path):
    # the workers whose statistics never came: their records (by index) read back and counted,
    # the others' skipped, a line that is not a record and a torn last line passed over
    from types import SimpleNamespace

    from latscope.load.shares import Share
    from latscope.load.merge import WorkerState, count_records_of
    from latscope.rundir import record_line

    t = 10**13
    lines = [record_line(RequestRecord(index=i, request_id=f"r-{i}", scheduled_ns=t,
                                       sent_ns=t + 1, end_ns=t + 50, first_token_ns=t + 9,
                                       chunk_ns=[t + 9, t + 20, t + 50], output_tokens=3,
                                       status=200)) for i in range(5, 9)]
    (tmp_path / "requests.jsonl").write_bytes(
        lines[0] + b'{"index":6,"request_id": broken\n' + lines[2] + lines[3][:40])
    counted: list = []
    run = SimpleNamespace(writer=SimpleNamespace(run_dir=tmp_path),
                          count=lambda record, gaps=None: counted.append((record, gaps)))
    dead = WorkerState(1, None, Share(1, [5, 6, 7, 8], None, 2))
    other = WorkerState(2, None, Share(2, range(100, 200), None, 2))
    count_records_of(run, [dead, other])  # type: ignore[arg-type]
    assert [r.index for r, _ in counted] == [5, 7]  # 6 is not a record, 8 was torn
    assert dead.received == 2 and other.received == 0
    assert all(r.chunk_ns == [] and gaps is not None for r, gaps in counted)  # read light


@pytest.mark.slow
def test_a_dead_workers_own_appended_records_are_kept_and_counted(server, tmp_path):
    # the workers append their lines to requests.jsonl themselves: one killed mid-run leaves
    # what it appended, the file stays readable (a line it tore is mended) and the summary
    # counts every record in it
    import threading

    server.reset()
    config = _config(server, tmp_path, num_requests=200, concurrency=4)
    config.workload.output_len = "30"  # ~170 ms a request: the kill lands mid-run
    requests = tmp_path / "run" / "requests.jsonl"
    killed: list[int] = []

    def kill_worker_1_after_some_lines() -> None:
        deadline = time.monotonic() + 60
        while not killed and time.monotonic() < deadline:
            if requests.exists() and requests.read_bytes().count(b"\n") >= 20:
                for child in multiprocessing.active_children():
                    if child.name == "latscope-bench-worker-1":
                        killed.append(child.pid)
                        os.kill(child.pid, signal.SIGKILL)  # a process this test's run started
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_worker_1_after_some_lines, daemon=True)
    watcher.start()
    result = run_workers(config, 2)
    watcher.join(5)
    assert killed
    failed = result.summary["workers_failed"]
    assert len(failed) == 1 and "worker 1" in failed[0] and "SIGKILL" in failed[0]
    _, records, summary = read_run(result.run_dir)  # readable: no torn line in the middle
    by_worker = {w["worker"]: w for w in summary["workers"]}
    assert by_worker[0]["measured"] == 100
    assert 0 < by_worker[1]["measured"] < 100
    assert {w["records_written_by"] for w in summary["workers"]} == {"worker"}
    assert len(records) == by_worker[0]["requests"] + by_worker[1]["requests"]
    assert len({r.request_id for r in records}) == len(records)
    assert summary["requests"]["total"] == sum(not r.warmup for r in records)


def test_a_line_torn_by_a_killed_writer_is_mended_among_the_others(tmp_path):
    # a worker killed in the middle of its write leaves part of a line, and the next process's
    # append lands right after it: the fragment is blanked (the line reads as the whole record
    # after it), a fragment at the very end is cut, and the file reads whole
    from latscope.rundir import iter_jsonl, mend_torn_lines, record_line

    t = 10**13
    lines = [record_line(RequestRecord(index=i, request_id=f"r-{i}", scheduled_ns=t,
                                       sent_ns=t + 1, end_ns=t + 50, first_token_ns=t + 9,
                                       chunk_ns=[t + 9 + k for k in range(20)],
                                       output_tokens=20, status=200)) for i in range(5)]
    path = tmp_path / "requests.jsonl"
    path.write_bytes(lines[0] + lines[1][:70] + lines[2] + lines[3] + lines[4][:33])
    with pytest.raises(ConfigError):  # as torn, unreadable
        list(iter_jsonl(path))
    assert mend_torn_lines(path) == 2
    assert [obj["index"] for obj in iter_jsonl(path)] == [0, 2, 3]
    assert path.read_bytes().endswith(lines[3])
    assert mend_torn_lines(path) == 0  # mended once: a blanked fragment is not mended again


def test_a_worker_that_cannot_append_stops_its_load_with_the_cause(tmp_path):
    # a full disk (here /dev/full) while a worker appends its lines: its writer's failure is
    # set, which stops its load (RequestFlow.one raises it) and names the cause; nothing more
    # is written
    from types import SimpleNamespace

    from latscope.errors import OutputError
    from latscope.load.worker import _records_sink

    writer = SimpleNamespace(failure=None)
    worker = SimpleNamespace(run=SimpleNamespace(writer=writer))
    with _records_sink(None, worker, "/dev/full") as append:  # type: ignore[arg-type]
        append(b'{"index":1}\n')
        assert isinstance(writer.failure, OutputError)
        assert "No space left" in str(writer.failure) and "/dev/full" in str(writer.failure)
        first = writer.failure
        append(b'{"index":2}\n')
        assert writer.failure is first
