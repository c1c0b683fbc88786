"""diagnose's profile is of a steady batch: ``/start_profile`` once every slot of the closed loop
at the knee has turned over, ``/stop_profile`` before the batch drains. Against the fake server,
whose kernel receive times and profiler calls give the requests in flight at each call exactly
(on an H200 the old window, ramp-up and drain inside it, read a server at 98-100% NVML
utilisation as 47% busy; the steady one 79%)."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from latscope.campaign import profiling
from latscope.campaign.state import Budget, DiagnoseOptions, Diagnosis
from latscope.errors import ConfigError
from latscope.load import BenchConfig, WorkloadSpec
from latscope.rundir import RunDir
from summaries import bench_summary  # tests/

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: fakeserver
from fakeserver import FakeServer  # noqa: E402

LOAD = 8


def _state(tmp_path: Path, trace_dir: Path, rps: float | None) -> Diagnosis:
    run = RunDir.create("diagnose", tmp_path / "run")
    state = Diagnosis(DiagnoseOptions(trace_dir=str(trace_dir)), run, lambda _: None)
    state.levels = {"knee": LOAD}
    if rps is not None:
        state.observations = {float(LOAD): SimpleNamespace(
            summary=bench_summary(throughput={"requests_per_s": rps}))}
    return state


def _in_flight(truth: dict, at_ns: int) -> int:
    return sum(1 for t in truth.values() if t.recv_ns <= at_ns and (not t.end_ns
                                                                     or t.end_ns > at_ns))


def _in_flight_over(truth: dict, start_ns: int, stop_ns: int, points: int = 200) -> list[int]:
    step = (stop_ns - start_ns) / (points - 1)
    return [_in_flight(truth, int(start_ns + i * step)) for i in range(points)]


def _calls(server: FakeServer) -> list[tuple[str, int]]:
    with urllib.request.urlopen(server.url + "/profile_calls", timeout=10) as resp:
        return [tuple(c) for c in json.loads(resp.read())]


@pytest.mark.slow
def test_the_profile_starts_on_a_full_batch_and_stops_before_it_drains(tmp_path, monkeypatch):
    monkeypatch.setattr(profiling, "SETTLE_S", 0.0)
    monkeypatch.setattr(profiling, "PROFILE_LOAD_S", 0.5)
    monkeypatch.setattr(profiling, "MARGIN_S", 1.0)
    trace_dir = tmp_path / "prof"
    # 8 slots, 25 ms a request: at most 320 req/s, so 0.5 s + 1 s at the 400 req/s the sweep
    # "measured" is at least ~2 s of load: the hold ends on time, inside the load
    with FakeServer(ttft_ms=5, itl_ms=5, output_tokens=5, profile_dir=str(trace_dir)) as srv:
        state = _state(tmp_path, trace_dir, rps=400.0)
        base = BenchConfig(url=srv.url, workload=WorkloadSpec(input_len=8, output_len=5))
        paths = profiling.take_profile(state, base, None, Budget(120))
        truth, calls = srv.truth(), _calls(srv)
    assert [c[0] for c in calls] == ["/start_profile", "/stop_profile"]
    (_, start_ns), (_, stop_ns) = calls
    # the batch is full through the window (the loop's last request is sent after it): a slot
    # between a response's end and its next request, or a client stalled on a busy box, dips it
    # for an instant; a ramp or a drain inside the window would hold it low for a wave
    held = sorted(_in_flight_over(truth, start_ns, stop_ns))
    assert held[len(held) // 2] == LOAD and sum(held) / len(held) >= 0.9 * LOAD, str(held)
    done_before = sum(1 for t in truth.values() if t.end_ns and t.end_ns < start_ns)
    assert done_before >= LOAD  # one wave completed first: the ramp is outside the window
    sent_after = sum(1 for t in truth.values() if t.recv_ns > stop_ns)
    assert sent_after > 0
    assert 0.45 <= (stop_ns - start_ns) / 1e9 < 2.0
    assert paths and Path(paths[0]).parent == trace_dir
    kept = json.loads((state.run.path / "profile-load" / "profile.json").read_text())
    assert kept["started"] is True and kept["stopped_by"] == "time" and kept["load"] == LOAD
    assert any(n.startswith(f"profile: a steady batch at c={LOAD}") for n in state.notes)


@pytest.mark.slow
def test_a_load_too_short_for_the_hold_stops_the_profile_when_its_last_request_is_sent(
        tmp_path, monkeypatch):
    monkeypatch.setattr(profiling, "SETTLE_S", 0.0)
    monkeypatch.setattr(profiling, "PROFILE_LOAD_S", 30.0)  # far longer than the load
    trace_dir = tmp_path / "prof"
    # 205 ms a request: between the last send and the stop reaching the server, a request ends
    # every ~26 ms, so a client stalled for a while on a busy box still stops with the batch
    # nearly full (at 25 ms a request, a 10 ms stall lost three: 5 of 8 in flight)
    with FakeServer(ttft_ms=5, itl_ms=50, output_tokens=5, profile_dir=str(trace_dir)) as srv:
        state = _state(tmp_path, trace_dir, rps=None)  # unknown: 2 waves + 2 waves
        base = BenchConfig(url=srv.url, workload=WorkloadSpec(input_len=8, output_len=5))
        profiling.take_profile(state, base, None, Budget(120))
        truth, calls = srv.truth(), _calls(srv)
    (_, start_ns), (_, stop_ns) = calls
    assert (stop_ns - start_ns) / 1e9 < 5.0
    # stopped as the drain began, not inside it
    assert _in_flight(truth, stop_ns) >= LOAD - 2
    kept = json.loads((state.run.path / "profile-load" / "profile.json").read_text())
    assert kept["stopped_by"] == "drain"


def test_a_profile_needs_the_servers_trace_dir(tmp_path):
    run = RunDir.create("diagnose", tmp_path / "run")
    state = Diagnosis(DiagnoseOptions(), run, lambda _: None)
    with pytest.raises(ConfigError, match="--trace-dir"):
        profiling.take_profile(state, BenchConfig(url="http://127.0.0.1:9"), None, Budget(60))


def test_profile_requests_cover_a_wave_each_side_of_the_hold():
    state = SimpleNamespace(observations={64.0: SimpleNamespace(
        summary=bench_summary(throughput={"requests_per_s": 150.0}))})
    n = profiling.profile_requests(state, 64)
    assert n == 2 * 64 + int(150.0 * (profiling.PROFILE_LOAD_S + profiling.MARGIN_S))
    assert profiling.profile_requests(SimpleNamespace(observations={}), 4) == 2 * 4 + 8


def test_the_capacity_gate_reads_the_telemetry_not_the_profile_where_both_exist(tmp_path):
    # the H200's --max-num-batched-tokens 512 recording (steady profile, NVML beside the sweep):
    # the profile ran under the profiler, which slows the host; the sweep's NVML did not
    import tarfile

    from latscope.campaign import conclude
    from latscope.findings import conclude as seam
    from latscope.campaign import replay as replay_mod
    from latscope.campaign.state import Diagnosis as State

    tgz = Path(__file__).resolve().parents[2] / "data" / "gpu-matrix" / \
        "token-budget-512-steady.tgz"
    with tarfile.open(tgz) as tar:
        tar.extractall(tmp_path, filter="data")
    src = tmp_path / "token-budget-512-steady"
    out = tmp_path / "out"
    replay_mod._copy(src, out)
    state = State(replay_mod._options(replay_mod._manifest(src)), RunDir.open(out),
                  lambda _: None)
    replay_mod._restore(state, out)
    busy = seam._gpu_busy(conclude.inputs_of(state))
    assert busy is not None and busy.kind == "telemetry" and "NVML" in busy.source
    profile_busy = 1 - state.trace.devices[0].breakdown.idle_share
    assert abs(busy.share - profile_busy) > 0.01  # a different figure: not the profile's
    state.observations = {}  # no telemetry read: the profile's share is the fallback
    fallback = seam._gpu_busy(conclude.inputs_of(state))
    assert fallback is not None and fallback.kind == "profile"
    assert fallback.share == pytest.approx(profile_busy)
