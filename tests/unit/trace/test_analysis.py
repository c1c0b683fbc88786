"""Analyses on the real fixtures: the breakdown adds up, unions are not sums, windows, clamping,
and the done-criterion: fixture #6 (vLLM eager on B200) is named GPU-idle, with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from latscope.model import Severity
from latscope.trace.analysis import intervals as iv
from latscope.trace.analysis.device import clamp_same_queue
from latscope.trace.analyze import AnalysisOptions, analyze_trace
from latscope.findings.trace import trace_findings
from latscope.trace.model import Table
from latscope.trace.readers import read_trace


def test_union_merges_overlaps_and_ignores_order():
    s = np.array([10, 0, 5, 30], dtype=np.int64)
    e = np.array([20, 8, 12, 40], dtype=np.int64)
    us, ue = iv.union(s, e)
    assert us.tolist() == [0, 30] and ue.tolist() == [20, 40]
    assert iv.union_length(s, e) == 30  # a sum of durations would give 35
    gs, ge = iv.complement(us, ue, 0, 50)
    assert gs.tolist() == [20, 40] and ge.tolist() == [30, 50]
    assert iv.overlap_with(np.array([15, 35]), np.array([35, 45]), us, ue).tolist() == [10, 5]


def test_clamp_moves_same_queue_overlap_only():
    table = Table({"stream": np.array([1, 1, 2]), "start": np.array([0, 5, 5]),
                   "end": np.array([10, 20, 20]), "kind": np.zeros(3, np.int8)})
    clamped, stats = clamp_same_queue(table)
    by_stream = sorted(zip(clamped.stream.tolist(), clamped.start.tolist()))
    assert by_stream == [(1, 0), (1, 10), (2, 5)]  # other queue untouched
    assert stats["activities_clamped"] == 1 and stats["overlap_removed_ns"] == 5


def test_clamp_reports_duration_lost_not_distance_moved():
    # B [10, 50) lies inside A [0, 100) on the same queue; C [60, 120) overlaps A by 40.
    table = Table({"stream": np.array([1, 1, 1]), "start": np.array([0, 10, 60]),
                   "end": np.array([100, 50, 120]), "kind": np.zeros(3, np.int8)})
    clamped, stats = clamp_same_queue(table)
    before, after = 100 + 40 + 60, int(np.sum(clamped.end - clamped.start))
    assert stats["overlap_removed_ns"] == before - after == 80


@pytest.mark.parametrize("key", ["b200", "fullgraph", "h100", "mi250", "mi300x_hf", "piecewise",
                                 "sglang"])
def test_breakdown_adds_up_to_the_window(key, loaded):
    result = analyze_trace(loaded(key))
    for dev in result.devices:
        b = dev.breakdown
        parts = b.compute_ns + b.exposed_comm_ns + b.exposed_copy_ns + b.idle_ns
        assert parts == b.window_ns == dev.window.length_ns
        assert 0 <= b.busy_ns <= b.window_ns
        for cat in dev.kernels.categories:
            assert cat.union_ns <= cat.sum_ns and cat.union_ns <= b.busy_ns


def test_b200_eager_gpu_idle_most_of_window_and_why(loaded):
    result = analyze_trace(loaded("b200"))
    dev = result.devices[0]
    b = dev.breakdown
    # SOURCES.md #6: "86 % GPU idle over 84 ms"
    assert b.window_ns == pytest.approx(84e6, rel=0.02)
    assert b.idle_share == pytest.approx(0.86, abs=0.01)
    gaps = dev.gaps
    assert gaps.by_cause.host_wait_ns > 0.9 * b.idle_ns
    kinds = {k.kind for k in gaps.cpu_during_idle.self_time_by_kind}
    assert {"python", "cpu_op", "runtime"} <= kinds
    idle = next(f for f in trace_findings(result) if f.id == "trace.gpu_idle")
    assert idle.severity == Severity.CRITICAL
    assert "86%" in idle.title and "host" in idle.title
    assert "launch" in idle.why and "python" in idle.why
    graph = next(e for e in idle.evidence if e.name.startswith("GPU activities launched by"))
    assert graph.value == "0 of 929"  # eager mode: no CUDA graphs


def test_leading_warmup_gap_is_trimmed(loaded):
    # SOURCES.md #3: a 463 ms leading gap after one early kernel
    dev = analyze_trace(loaded("sglang")).devices[0]
    assert "trimmed a 463" in dev.window.method
    assert dev.window.length_ns < 20e6


def test_steps_window_uses_annotations(loaded):
    trace = loaded("h100")
    dev = analyze_trace(trace, AnalysisOptions(window="steps")).devices[0]
    assert dev.window.method == "steps:gpu_annotation"
    r = trace.ranges
    gpu_steps = [i for i in range(len(r)) if trace.names[r.name[i]].startswith("ProfilerStep#")
                 and r.kind[i] == 3]
    assert dev.window.length_ns == int(r.end[gpu_steps].max() - r.start[gpu_steps].min())


def test_graph_launch_kernels_share_one_correlation(loaded):
    # SOURCES.md #1: 421 of 425 kernels share the correlation id of one hipGraphLaunch
    dev = analyze_trace(loaded("fullgraph")).devices[0]
    assert dev.gaps.launch_delay.graph_launched >= 421


def test_amd_clamp_reported_and_optional(traces_dir):
    trace = read_trace(traces_dir / "amd_mi350x_rocprofv3_results.json.gz")
    clamped = analyze_trace(trace).devices[0]
    raw = analyze_trace(trace, AnalysisOptions(clamp_queues=False)).devices[0]
    assert clamped.queue_clamp.activities_clamped > 0
    assert raw.queue_clamp.activities_clamped == 0
    assert raw.queue_clamp.overlapping_pairs == clamped.queue_clamp.overlapping_pairs
    assert any(f.id == "trace.queue_overlap" for f in trace_findings(analyze_trace(trace)))


def test_generic_kernels_found_on_both_vendors(loaded):
    for key in ("mi300x_hf", "h100"):
        kernels = analyze_trace(loaded(key)).devices[0].kernels
        rules = {r.rule for r in kernels.fallbacks}
        assert "elementwise_strided" in rules


def test_nsys_pageable_copies_found(traces_dir):
    result = analyze_trace(read_trace(traces_dir / "nvidia_a100_nsys2022.2_saxpy.sqlite.gz"))
    ids = {f.id for f in trace_findings(result)}
    assert "trace.pageable_copies" in ids and "trace.blocking_copies" in ids
    rows = {r.direction: r for r in result.devices[0].copies.by_direction}
    assert rows["H2D"].count == 10 and rows["D2H"].count == 5
    assert rows["H2D"].bytes == 10 * 262144000


def test_cpu_only_trace_is_skipped(fixtures_dir):
    path = fixtures_dir / "vllm" / "cpu-vllm0.32" / "profile_rank0.pt.trace.json.gz"
    findings = trace_findings(analyze_trace(read_trace(path)))
    assert [f.severity for f in findings] == [Severity.SKIPPED]


def test_rocm_host_memory_inference_only_for_large_slow_copies():
    from latscope.trace.analysis.copies import INFER_MIN_BYTES, PAGEABLE_GBPS, _host_memory
    from latscope.trace.model import HostMem

    unknown = np.full(3, HostMem.UNKNOWN, dtype=np.int8)
    nbytes = np.array([INFER_MIN_BYTES, INFER_MIN_BYTES, 4096])
    slow = int(INFER_MIN_BYTES / (PAGEABLE_GBPS / 2))  # ns at half the threshold bandwidth
    fast = int(INFER_MIN_BYTES / (PAGEABLE_GBPS * 2))
    dur = np.array([slow, fast, slow])
    out = _host_memory(unknown, nbytes, dur, "amd")
    assert out.tolist() == [HostMem.PAGEABLE, HostMem.UNKNOWN, HostMem.UNKNOWN]
    # on CUDA the recorded kind is kept as is
    assert _host_memory(unknown, nbytes, dur, "nvidia").tolist() == unknown.tolist()


def test_explicit_window_and_bad_spec(loaded):
    from latscope.errors import ConfigError

    dev = analyze_trace(loaded("b200"), AnalysisOptions(window="10:20")).devices[0]
    assert dev.window.method == "explicit" and dev.window.length_ns == 10_000_000
    b = dev.breakdown
    parts = b.compute_ns + b.exposed_comm_ns + b.exposed_copy_ns + b.idle_ns
    assert parts == 10_000_000
    with pytest.raises(ConfigError):
        analyze_trace(loaded("b200"), AnalysisOptions(window="20:10"))
    with pytest.raises(ConfigError):
        analyze_trace(loaded("b200"), AnalysisOptions(window="first-step"))


def test_trailing_gap_of_explicit_window_is_not_blamed_on_earlier_work(loaded):
    trace = loaded("h100")
    auto = analyze_trace(trace).devices[0]
    assert auto.window.method == "auto"
    span_ms = auto.window.length_ns / 1e6
    wide = analyze_trace(trace, AnalysisOptions(window=f"0:{span_ms + 50}")).devices[0]
    extra_idle = wide.gaps.idle_ns - auto.gaps.idle_ns
    assert extra_idle > 49e6  # the 50 ms added after the last activity
    # nothing issued the (absent) work after it: the added idle is "unknown", not "queued"
    assert (wide.gaps.by_cause.queued_ns - auto.gaps.by_cause.queued_ns
            < 1e6)
    assert wide.gaps.by_cause.unknown_ns - auto.gaps.by_cause.unknown_ns \
        >= extra_idle - 1e6
