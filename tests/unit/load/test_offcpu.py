"""The client's own run-queue wait: read from the kernel, reported beside the run, and a reason
its timing is not trusted when the host kept it off the CPU for much of the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from latscope.campaign.observe import client_reliability
from latscope.reliability import ClientReliability
from latscope.load.offcpu import run_queue_wait_s
from latscope.load.summary import client_warnings, off_cpu_share
from latscope.load.workers import merged_client_figures
from summaries import bench_summary  # tests/


def test_the_wait_is_the_second_schedstat_field_and_none_where_the_kernel_does_not_say(tmp_path):
    stat = tmp_path / "schedstat"
    stat.write_text("812000000 4500000000 77\n")  # on-CPU ns, run-queue ns, slices
    assert run_queue_wait_s(stat) == 4.5
    stat.write_text("garbage\n")
    assert run_queue_wait_s(stat) is None
    assert run_queue_wait_s(tmp_path / "absent") is None


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.serial
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or run_queue_wait_s() is None,
                    reason="needs Linux schedstat and CPU affinity")
def test_a_thread_sharing_its_cpu_with_two_busy_processes_waits_about_two_thirds_of_the_time():
    # three CPU-bound tasks on one CPU get a third of it each, whatever the scheduler: this
    # thread then waits on the run queue for ~2/3 of the wall time, which is what it must read
    cpu = min(os.sched_getaffinity(0))
    before_affinity = os.sched_getaffinity(0)
    spin = "import time\nend = time.perf_counter() + 20\nwhile time.perf_counter() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        for hog in hogs:
            os.sched_setaffinity(hog.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        _spin(0.3)  # the hogs are running by now
        wait0, wall0 = run_queue_wait_s(), time.perf_counter()
        _spin(1.5)
        wait, wall = run_queue_wait_s() - wait0, time.perf_counter() - wall0
    finally:
        os.sched_setaffinity(0, before_affinity)
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert 0.4 < wait / wall < 0.9, (wait, wall)


def test_a_client_kept_off_the_cpu_is_warned_of_and_past_a_quarter_not_trusted():
    summary = {"ttft_ms": {"p50": 50.0}}
    assert off_cpu_share({"run_queue_wait_s": 0.5, "wall_s": 2.0}) == 0.25
    assert off_cpu_share({"run_queue_wait_s": None, "wall_s": 2.0}) is None
    assert not client_warnings({"run_queue_wait_s": 0.05, "wall_s": 2.0}, summary)  # 2.5%
    [warning] = client_warnings({"run_queue_wait_s": 0.5, "wall_s": 2.0}, summary)
    assert "waited for a CPU 25% of the run" in warning

    def verdict(wait_s: float) -> ClientReliability:
        return client_reliability(bench_summary(client={"run_queue_wait_s": wait_s,
                                                        "wall_s": 10.0}, **summary), None)

    assert verdict(1.0).reliable and verdict(1.0).off_cpu_share == 0.1
    unreliable = verdict(3.0)
    assert not unreliable.reliable and "waited for a CPU 30% of the run" in unreliable.why


def test_workers_report_the_share_of_the_one_kept_off_the_cpu_longest():
    def worker(index: int, wait_s: float | None, wall_s: float) -> dict:
        return {"worker": index, "cpu_s": 0.5, "wall_s": wall_s, "cpu_utilization": 0.5,
                "loop_lag_ms": {"p50": 0.1, "p99": 1.0}, "send_lag_p99_ms": 0.1,
                "event_loop": "uvloop", "run_queue_wait_s": wait_s}

    summary = {"tokens": {"output_total": 1000}, "ttft_ms": {"p50": 50.0}}
    merged = merged_client_figures([worker(0, 0.1, 2.0), worker(1, 0.6, 1.0),
                                    worker(2, None, 2.0)], summary)
    assert merged["wall_s"] == 2.0 and merged["run_queue_wait_s"] == pytest.approx(1.2)
    assert off_cpu_share(merged) == pytest.approx(0.6)  # worker 1's own 60%
    assert [w for w in merged["warnings"] if "waited for a CPU" in w] == [
        "worker 1: the client's event loop waited for a CPU 60% of the run (run-queue wait, "
        "/proc/thread-self/schedstat): other processes held its cores, and its timestamps may "
        "be late"]


def test_a_bench_run_reports_its_loop_threads_run_queue_wait_within_its_window(tmp_path):
    from fakeserver import FakeServer
    from latscope.load import BenchConfig, run_bench

    with FakeServer(ttft_ms=5, itl_ms=1) as srv:
        config = BenchConfig(url=srv.url, model="fake-model", num_requests=32, concurrency=4,
                             output_dir=tmp_path / "run")
        config.workload.output_len = "16"
        result = run_bench(config)
    client = result.summary["client"]
    if run_queue_wait_s() is None:  # a kernel without schedstat: said as unknown
        assert client["run_queue_wait_s"] is None
    else:
        assert 0.0 <= client["run_queue_wait_s"] <= client["wall_s"]
