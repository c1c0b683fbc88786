"""``campaign.compare.compare_runs`` over run directories with a known truth
(tests/compare_samples.py writes them with latscope's own writer), and over the replayed GPU
recordings: the same configuration passes, a planted regression fails naming its layer, runs
that measured different things are refused with the difference listed, and a run too short for
its figures leaves the gate undecided."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from compare_samples import write_run
from latscope.analysis.compare_model import (
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_UNDECIDED,
    load_comparison,
)
from latscope.campaign.compare import CompareOptions, compare_runs
from latscope.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
DRAWS = 500  # enough for the tests' clear-cut cases, a quarter of the time


def _compare(base, new, **options):
    return compare_runs(base if isinstance(base, list) else [base],
                        new if isinstance(new, list) else [new],
                        CompareOptions(draws=DRAWS, **options))


def _row(c, metric):
    return next(r for r in c.metrics if r.metric == metric)


def test_the_same_configuration_twice_is_no_regression(tmp_path):
    c = _compare(write_run(tmp_path / "a", seed=1), write_run(tmp_path / "b", seed=2))
    assert c.exit_code == EXIT_OK, c.reasons
    assert c.status == "no regression"
    assert {r.gate for r in c.metrics if r.gate} == {"pass"}
    assert "regression" not in {r.verdict for r in c.metrics}
    assert [d.key for d in c.differences] == ["workload.seed"]  # listed, not refused
    assert c.differences[0].action == "list"


def test_a_planted_queue_is_a_regression_named_queueing_with_the_gauges(tmp_path):
    base = write_run(tmp_path / "a", seed=1, running=4, waiting=0)
    new = write_run(tmp_path / "b", seed=2, ttft_ms=80, queue_share=0.5, running=2, waiting=6)
    c = _compare(base, new)
    assert c.exit_code == EXIT_REGRESSION
    ttft = _row(c, "ttft_mean")
    assert ttft.verdict == "regression" and ttft.gate == "fail"
    assert ttft.within[0] > 0.10  # the whole interval beyond the tolerance
    assert "queueing" in c.layer_sentence
    assert "running capped at 2 in NEW" in c.layer_sentence
    moved = next(f for f in c.findings if f["id"] == "compare.layer_moved")
    assert moved["layer"] == "queue" and moved["severity"] == "critical"
    queue = next(r for r in c.layers if r.key == "ttft.server.queue")
    assert queue.share is not None and queue.share > 0.5


@pytest.mark.parametrize("config, label", [({"input_len": "256"}, "--input-len"),
                                           ({"concurrency": 8}, "--concurrency"),
                                           ({"mix": [{"name": "long"}]}, "--mix")])
def test_runs_of_another_workload_or_load_are_refused_with_the_difference(tmp_path, config,
                                                                          label):
    base = write_run(tmp_path / "a", seed=1)
    new = write_run(tmp_path / "b", seed=2, config=config,
                    concurrency=config.get("concurrency", 4))
    c = _compare(base, new)
    assert c.exit_code == EXIT_UNDECIDED and c.status == "not comparable"
    refused = [d for d in c.differences if d.action == "refuse"]
    assert label in [d.label for d in refused]
    assert label in c.headline
    assert all(r.verdict == "inconclusive" and not r.gate for r in c.metrics)  # not judged
    assert [f["id"] for f in c.findings][0] == "compare.not_comparable"


def test_open_loop_runs_draw_their_throughput_from_the_arrivals(tmp_path):
    base = write_run(tmp_path / "a", seed=1, rate=20.0)
    new = write_run(tmp_path / "b", seed=2, rate=20.0)
    c = _compare(base, new)
    rps = _row(c, "rps")
    assert rps.within is not None and rps.within[0] < 0 < rps.within[1]  # the same rate
    assert rps.base == pytest.approx(20.0, rel=0.25)  # Poisson arrivals at 20/s
    other = _compare(base, write_run(tmp_path / "c", seed=3, rate=40.0))
    assert [d.key for d in other.differences if d.action == "refuse"] == ["load.rate"]


def test_sizes_drawn_from_one_range_with_other_seeds_are_one_workload_a_shifted_one_not(
        tmp_path):
    # 40 prompts of 96..160 tokens: these two seeds draw means 9% apart (122.3 and 134.0),
    # within three standard errors of their difference: the sampling of one workload
    base = write_run(tmp_path / "a", n=40, seed=5, prompt_range=(96, 160))
    again = write_run(tmp_path / "b", n=40, seed=10, prompt_range=(96, 160))
    assert "workload.prompt_tokens" not in [d.key for d in _compare(base, again).differences]
    longer = write_run(tmp_path / "c", n=40, seed=3, prompt_range=(126, 190))  # +30 tokens
    refused = {d.key: d for d in _compare(base, longer).differences if d.action == "refuse"}
    assert "workload.prompt_tokens" in refused


def test_allow_compares_anyway_with_the_difference_as_a_caveat(tmp_path):
    base = write_run(tmp_path / "a", seed=1)
    new = write_run(tmp_path / "b", seed=2, config={"input_len": "256"})
    c = _compare(base, new, allow=frozenset({"workload"}))
    assert c.status != "not comparable"
    assert [d.action for d in c.differences if d.label == "--input-len"] == ["caveat"]


def test_a_prefix_cache_that_served_one_side_only_refuses(tmp_path):
    c = _compare(write_run(tmp_path / "a", seed=1, hit_rate=0.0),
                 write_run(tmp_path / "b", seed=1, hit_rate=0.9))
    refused = {d.key: d for d in c.differences if d.action == "refuse"}
    assert "cache.prefix_hit_rate" in refused
    assert refused["cache.prefix_hit_rate"].new == "90%"


def test_a_client_unreliable_on_one_side_refuses(tmp_path):
    stalled = {"cpu_utilization": 0.97, "loop_lag_ms": {"mean": 30.0, "p99": 400.0}}
    c = _compare(write_run(tmp_path / "a", seed=1), write_run(tmp_path / "b", seed=2,
                                                               client=stalled))
    refused = [d for d in c.differences if d.action == "refuse"]
    assert [d.key for d in refused] == ["client.reliable"]
    assert c.exit_code == EXIT_UNDECIDED


def test_runs_on_other_gpus_are_refused(tmp_path):
    c = _compare(write_run(tmp_path / "a", seed=1, gpu="NVIDIA H200"),
                 write_run(tmp_path / "b", seed=2, gpu="NVIDIA H100 80GB HBM3"))
    gpu = next(d for d in c.differences if d.key == "hardware.gpu")
    assert (gpu.action, gpu.base, gpu.new) == ("refuse", "NVIDIA H200", "NVIDIA H100 80GB HBM3")


def test_a_run_too_short_for_its_figures_leaves_the_gate_undecided(tmp_path):
    c = _compare(write_run(tmp_path / "a", n=12, seed=1), write_run(tmp_path / "b", n=12,
                                                                     seed=2))
    assert c.exit_code == EXIT_UNDECIDED and c.status == "inconclusive"
    assert "too short" in _row(c, "ttft_mean").why
    assert any("too short" in r for r in c.reasons)


def test_a_tail_gate_needs_its_requests_and_the_policy_names_it(tmp_path):
    base, new = write_run(tmp_path / "a", seed=1), write_run(tmp_path / "b", seed=2)
    c = _compare(base, new, fail_on="ttft_p99>+10%")
    assert c.policy == ["ttft_p99>+10%"]
    p99 = _row(c, "ttft_p99")
    assert p99.gate == "undecided" and "needs 1000" in p99.why  # 200 requests
    assert _row(c, "ttft_mean").gate == ""  # not in this policy


def test_errors_change_in_points(tmp_path):
    c = _compare(write_run(tmp_path / "a", seed=1), write_run(tmp_path / "b", seed=2,
                                                               fail_every=5))
    errors = _row(c, "errors")
    assert not errors.relative and errors.change == pytest.approx(0.2)
    assert errors.verdict == "regression" and c.exit_code == EXIT_REGRESSION


def test_repeated_runs_give_a_between_run_interval_and_say_which_the_verdict_used(tmp_path):
    base = [write_run(tmp_path / f"a{i}", seed=i, ttft_ms=50 + 3 * i) for i in range(3)]
    new = [write_run(tmp_path / f"b{i}", seed=10 + i, ttft_ms=50 + 3 * i) for i in range(3)]
    c = _compare(base, new)
    ttft = _row(c, "ttft_mean")
    assert ttft.between is not None and ttft.within is not None
    width = {"within-run": ttft.within[1] - ttft.within[0],
             "between-run": ttft.between[1] - ttft.between[0]}
    assert ttft.interval == max(width, key=width.get)  # the wider one
    assert ttft.n_base == 600


def test_the_gpu_recordings_of_an_h200_and_an_h100_are_not_comparable(tmp_path):
    dirs = []
    for name in ("healthy-light", "healthy-light-h100"):
        with tarfile.open(REPO / "tests" / "data" / "gpu-matrix" / f"{name}.tgz") as tar:
            tar.extractall(tmp_path, filter="data")
        dirs.append(tmp_path / name)
    c = _compare(dirs[0], dirs[1])
    assert c.kind == "diagnose" and c.status == "not comparable"
    gpu = next(d for d in c.differences if d.key == "hardware.gpu")
    assert (gpu.base, gpu.new, gpu.action) == ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "refuse")
    assert c.sweep is not None and c.sweep.metrics_at == 4  # the highest load both measured
    assert c.diagnose is not None and c.diagnose.verdict_base.startswith("At all requests")
    assert any(f.change == "appeared" and f.id == "gpu.busy" for f in c.diagnose.findings)
    same = _compare(dirs[0], dirs[0])
    assert "hardware.gpu" not in [d.key for d in same.differences]


def test_run_directories_of_different_kinds_are_refused_in_one_line(tmp_path):
    bench = write_run(tmp_path / "a", seed=1)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "manifest.json").write_text('{"schema_version": 2, "kind": "trace"}')
    with pytest.raises(ConfigError, match="kinds bench, trace"):
        _compare(bench, tmp_path / "t")


def _busy(run: Path, others: float) -> Path:
    """The run's host/cpu.json as env.hostload writes it: ``others`` cores taken by another
    process on a 2-core host."""
    from latscope.rundir import write_json

    (run / "host").mkdir(exist_ok=True)
    write_json(run / "host" / "cpu.json", {
        "window_s": 10.0, "cores": 2, "server_cpus": 2,
        "cores_used": {"latscope": 0.05, "server": 1.0, "others": others},
        "server_pids": [123], "others": [{"pid": 999, "comm": "pytest", "cores": others,
                                          "on_server_cpus": 1.0}] if others else []})
    return run


def test_a_host_busy_with_other_work_refuses_on_either_side_both_included(tmp_path):
    quiet = _busy(write_run(tmp_path / "a", seed=1), 0.0)
    busy = _busy(write_run(tmp_path / "b", seed=2), 0.9)
    c = _compare(quiet, busy)
    host = next(d for d in c.differences if d.key == "host.busy")
    assert (host.action, host.base, host.new) == (
        "refuse", "quiet (others used 0 of 2 CPUs)", "busy (others used 0.9 of 2 CPUs)")
    both = _compare(_busy(write_run(tmp_path / "c", seed=3), 0.8), busy)
    assert [d.key for d in both.differences if d.action == "refuse"] == ["host.busy"]
    assert "both runs" in both.differences[0].why
    assert _compare(quiet, busy, allow=frozenset({"host"})).status != "not comparable"
    calm = _compare(quiet, _busy(write_run(tmp_path / "d", seed=4), 0.1))  # under 20%
    assert "host.busy" not in [d.key for d in calm.differences]


def test_cpus_contended_under_latscope_itself_refuse(tmp_path):
    """latscope's own loop thread ready but off the CPU 16% of a run (schedstat): the host's
    CPUs were contended, and a comparison of a few percent cannot hold."""
    free = {"cpu_utilization": 0.05, "loop_lag_ms": {"mean": 0.1, "p99": 0.5},
            "run_queue_wait_s": 0.4, "wall_s": 10.0}
    c = _compare(write_run(tmp_path / "a", seed=1, client=free),
                 write_run(tmp_path / "b", seed=2, client={**free, "run_queue_wait_s": 1.6}))
    contended = next(d for d in c.differences if d.key == "client.contended")
    assert (contended.action, contended.base, contended.new) == (
        "refuse", "free (waited 4% of the run)", "contended (waited 16% of the run)")
    assert c.status == "not comparable"
    allowed = _compare(tmp_path / "a", tmp_path / "b", allow=frozenset({"client"}))
    assert allowed.status != "not comparable"


def _sweep(root: Path, name: str, ttft_ms: float, knee: float) -> Path:
    from latscope.analysis.knee import Knee
    from latscope.analysis.sweep import Step, SweepAnalysis
    from latscope.analysis.sweepfile import SweepFile, SweepMeta, write_sweep
    from latscope.rundir import RunDir

    run = RunDir.create("sweep", root / name)
    steps = []
    for load in (1, 2, 4):
        step = write_run(root / name / f"step-{load}", seed=int(load * 10 + ttft_ms),
                         concurrency=load, ttft_ms=ttft_ms * load, config={"concurrency": load})
        steps.append(Step(load, {"requests_per_s": 10.0 * load / (ttft_ms / 50),
                                 "ttft_p99_ms": ttft_ms * load}, run_dir=str(step)))
    meta = SweepMeta(url="http://127.0.0.1:8000", mode="concurrency", loads=[1, 2, 4],
                     slo=None, latency_cap=None, backoff=0.1, bench={})
    marked = Knee(load=knee, index=[1, 2, 4].index(knee), method="kneedle", score=0.5,
                  stability=1.0, measured_past=True, confidence="high")
    write_sweep(run.file("sweep.json"), SweepFile(meta=meta, steps=steps,
                                                  analysis=SweepAnalysis(knee=marked)))
    return run.path


def test_sweeps_compare_curve_against_curve_and_the_steps_at_one_load(tmp_path):
    c = _compare(_sweep(tmp_path, "a", 50, knee=4), _sweep(tmp_path, "b", 100, knee=2))
    assert c.kind == "sweep" and c.sweep is not None
    assert [p.load for p in c.sweep.points] == [1, 2, 4]
    assert c.sweep.metrics_at == 4  # the highest load both measured
    assert (c.sweep.knee_base, c.sweep.knee_new) == (4, 2)
    assert "knee c=4 -> c=2" in c.sweep.sentence and "-50%" in c.sweep.sentence
    knee = next(f for f in c.findings if f["id"] == "compare.knee_moved")
    assert knee["severity"] == "warning"
    assert _row(c, "ttft_mean").verdict == "regression"  # 200 ms against 400 at c=4
    at_two = _compare(_sweep(tmp_path, "c", 50, 4), _sweep(tmp_path, "d", 50, 4), load=2)
    assert at_two.sweep.metrics_at == 2
    with pytest.raises(ConfigError, match="not a load both sweeps measured"):
        _compare(_sweep(tmp_path, "e", 50, 4), _sweep(tmp_path, "f", 50, 4), load=3)


def test_traces_are_compared_by_trace_compare_and_the_gate_says_it_cannot_decide(tmp_path,
                                                                               capsys):
    from latscope.cli.main import main

    traces = REPO / "tests" / "data" / "multi-rank"
    for rank in (0, 1):
        assert main(["trace", str(traces / f"hta_sampled_rank-{rank}.json.gz"), "-o",
                     str(tmp_path / f"t{rank}"), "--quiet"]) == 0
    capsys.readouterr()
    c = _compare(tmp_path / "t0", tmp_path / "t1")
    assert c.kind == "trace" and c.trace is not None
    assert {r.key for r in c.trace.breakdown} >= {"busy", "idle", "window"}
    # compare.json holds the diff in ms, as trace.json does; read back, the same ns
    stored = c.to_dict()["trace"]
    busy = next(r for r in c.trace.breakdown if r.key == "busy")
    assert next(r for r in stored["breakdown"] if r["key"] == "busy")["a_ms"] == busy.a_ns / 1e6
    again = load_comparison(json.loads(json.dumps(c.to_dict()))).trace
    assert again is not None and [r.key for r in again.families] == \
        [r.key for r in c.trace.families]
    assert next(r for r in again.breakdown if r.key == "busy").a_ns == pytest.approx(busy.a_ns)
    assert c.exit_code == EXIT_UNDECIDED and not c.metrics
    assert "no per-request figures" in c.reasons[0]
    assert any(f["id"] == "compare.trace_moved" for f in c.findings)
