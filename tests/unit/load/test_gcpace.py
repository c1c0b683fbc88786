"""The collector paced by finished requests during a run, and put back as it was after it."""

from __future__ import annotations

import gc
import weakref

import pytest

import latscope.load.gcpace as gcpace
from fakeserver import FakeServer
from latscope.load import BenchConfig, run_bench
from latscope.load.gcpace import CollectorPace


class Node:
    """An object in a reference cycle (only the cyclic collector frees it)."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def _collector_as_found(monkeypatch):
    """Every test starts and ends with the collector on and nothing frozen; passes come by
    count only (a slow machine's second must not bring one early) unless a test says."""
    assert gc.isenabled() and gc.get_freeze_count() == 0 and gcpace._active == 0
    monkeypatch.setattr(gcpace, "_PERIOD_NS", 1 << 62)
    yield
    gc.unfreeze()
    gc.enable()


def _cycle() -> weakref.ref:
    return weakref.ref(Node())


def test_a_run_freezes_the_setup_turns_automatic_collection_off_and_puts_both_back():
    setup = [Node() for _ in range(100)]
    with CollectorPace(64) as pace:
        assert pace.pacing
        assert not gc.isenabled()
        assert gc.get_freeze_count() >= len(setup)  # never walked by the run's passes
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_it_is_put_back_when_the_run_fails():
    with pytest.raises(RuntimeError), CollectorPace(64):
        raise RuntimeError("the run failed")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_process_that_turned_collection_off_keeps_it_off_and_unpaced():
    gc.disable()
    with CollectorPace(64) as pace:
        assert not pace.pacing
        assert gc.get_freeze_count() == 0
        cycle = _cycle()
        for _ in range(pace.every):
            pace.finished()
        assert cycle() is not None  # no pass: the process chose none
    assert not gc.isenabled()


def test_objects_another_froze_stay_frozen():
    gc.freeze()
    theirs = gc.get_freeze_count()
    with CollectorPace(64):
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_freeze_count() == theirs


def test_overlapping_runs_put_it_back_when_the_last_ends():
    first, second = CollectorPace(64), CollectorPace(64)
    first.__enter__()
    second.__enter__()
    assert second.pacing  # paced too, though the first set the collector
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second still runs
    second.__exit__(None, None, None)
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_cycle_a_request_made_is_freed_within_every_finished_requests():
    with CollectorPace(64) as pace:
        assert pace.every == gcpace._MIN_EVERY  # at least, whatever the concurrency
        cycle = _cycle()
        for _ in range(pace.every - 1):
            pace.finished()
        assert cycle() is not None  # no automatic pass in between
        pace.finished()
        assert cycle() is None


def test_a_slow_servers_run_collects_at_least_once_a_second(monkeypatch):
    with CollectorPace(64) as pace:
        cycle = _cycle()
        pace.finished()
        assert cycle() is not None  # neither ``every`` requests nor a second yet
        pace.due_ns = 0  # as if a second went by since the last pass (or the run's start)
        pace.finished()
        assert cycle() is None
        assert pace.left == pace.every  # the count starts again from that pass


def test_the_pace_grows_with_concurrency_so_a_pass_costs_the_same_per_request():
    assert CollectorPace(1024).every == gcpace._MIN_EVERY
    assert CollectorPace(4096).every == 4 * 4096


def test_a_cycle_that_outlived_young_passes_is_freed_by_the_whole_heap_pass():
    with CollectorPace(64) as pace:
        node = Node()
        cycle = weakref.ref(node)
        for _ in range(pace.every):  # one young pass while it is alive: now an old object
            pace.finished()
        del node
        passes = 1
        while passes % gcpace._FULL_EVERY:
            for _ in range(pace.every):
                pace.finished()
            passes += 1
            if passes % gcpace._FULL_EVERY:
                assert cycle() is not None  # young passes never walk the old generation
        assert cycle() is None  # the 16th pass walked the whole (unfrozen) heap


def test_a_bench_run_paces_the_collector_and_leaves_it_as_it_was(tmp_path):
    seen: list[tuple[bool, bool]] = []

    def on_record(record) -> None:
        seen.append((gc.isenabled(), gc.get_freeze_count() > 0))

    with FakeServer(ttft_ms=0, itl_ms=0) as srv:
        config = BenchConfig(url=srv.url, model="fake-model", num_requests=40, concurrency=8,
                             warmup=8, output_dir=tmp_path / "run")
        config.workload.output_len = "16"
        result = run_bench(config, on_record=on_record)
    # the 40 measured, the warm-up and the stagger's ramp past it
    assert len(seen) == 40 + result.summary["requests"]["warmup_excluded"] >= 48
    assert set(seen) == {(False, True)}
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_run_stopped_by_an_error_leaves_the_collector_as_it_was(tmp_path):
    def on_record(record) -> None:
        if record.index == 5:
            raise RuntimeError("the caller's callback failed")

    with FakeServer(ttft_ms=0, itl_ms=0) as srv:
        config = BenchConfig(url=srv.url, model="fake-model", num_requests=40, concurrency=4,
                             output_dir=tmp_path / "run")
        config.workload.output_len = "16"
        with pytest.raises(RuntimeError, match="callback failed"):
            run_bench(config, on_record=on_record)
    assert gc.isenabled() and gc.get_freeze_count() == 0
