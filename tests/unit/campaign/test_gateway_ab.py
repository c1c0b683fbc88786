"""diagnose's A/B of the short-first gateway: the same server direct (A) and behind a gateway
process (B), alternating, short requests' TTFT the metric and long requests' E2E the guard.
Against the fake OpenAI server: the point is the experiment's mechanics, not the gain (that is
measured on a real vLLM in tests/integration/test_diagnose_vllm.py and benchmarks/gateway.py)."""

from __future__ import annotations

import dataclasses

import json
import sys
from pathlib import Path

import pytest

from latscope.campaign.proofs import _NoControl
from latscope.campaign.experiment import metric_of, run_experiment, size_class
from latscope.campaign.proposals import Proposal
from latscope.campaign.servers import Change, Running
from latscope.load import BenchConfig, WorkloadSpec
from latscope.model import RequestRecord
from abresults import gateway_ab  # tests/
from summaries import bench_summary  # tests/

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: fakeserver
from fakeserver import FakeServer  # noqa: E402


def _record(i: int, prompt: int, output: int, ttft_ms: float, e2e_ms: float) -> RequestRecord:
    sent = 1_000_000_000 * (i + 1)
    return RequestRecord(index=i, request_id=str(i), scheduled_ns=sent, sent_ns=sent,
                         first_token_ns=sent + int(ttft_ms * 1e6), end_ns=sent + int(e2e_ms * 1e6),
                         prompt_tokens=prompt, output_tokens=output, status=200)


def test_size_classes_of_a_90_10_mix_are_its_two_classes():
    records = [_record(i, 128, 32, 10.0, 50.0) for i in range(18)]
    records += [_record(18 + i, 1024, 128, 40.0, 400.0) for i in range(2)]
    records.append(_record(99, 2048, 0, 1.0, 1.0))
    records[-1].error_kind = "http"  # a failed request is in no class
    classes = size_class(records)
    assert len(classes["short"]) == 18 and len(classes["long"]) == 2
    assert all(r.prompt_tokens == 1024 for r in classes["long"])

    class Obs:  # what metric_of reads: the run's records and summary
        summary = bench_summary(ttft_ms={"mean": 13.0})

    Obs.records = records
    assert metric_of(Obs, "short_ttft_mean_ms") == 10.0
    assert metric_of(Obs, "long_e2e_mean_ms") == 400.0
    assert metric_of(Obs, "ttft_mean_ms") == 13.0


def test_uniform_sizes_have_no_long_class():
    classes = size_class([_record(i, 128, 32, 10.0, 50.0) for i in range(10)])
    assert len(classes["short"]) == 10 and classes["long"] == []


@pytest.mark.slow
def test_gateway_ab_alternates_direct_and_gateway_runs(tmp_path):
    with FakeServer(ttft_ms=5, itl_ms=1) as server:
        exp = gateway_ab(server.url, "short:0.8:8:4,long:0.2:64:40", tmp_path, requests=30,
                         warmup=7)
    result = exp.ab_result().to_dict()
    assert result["arms"] == ["A", "B", "A", "B"]
    assert result["change"] == "latscope gateway --policy sjf --max-inflight 2"
    assert len(result["a_values"]) == 2 and all(v > 0 for v in result["a_values"] + result["b_values"])
    guard = result["guard"]
    assert guard["metric"] == "long_e2e_mean_ms" and len(guard["b_values"]) == 2
    # B's requests went to the gateway, A's straight to the server
    configs = [json.loads((Path(d) / "manifest.json").read_text())["config"]
               for d in result["run_dirs"]]
    urls = [c["url"] for c in configs]
    assert urls[0] == urls[2] == server.url
    assert urls[1] == urls[3] != server.url
    # each run had its own prompts (its own seed): no arm served from another's prefix cache
    assert len({c["seed"] for c in configs}) == 4
    # every run as long as the proposal asked (the gateway's: gateway.fits.gateway_run_shape)
    assert {(c["num_requests"], c["warmup"]) for c in configs} == {(30, 7)}


def test_a_gain_bought_with_the_guards_loss_is_said_so():
    from latscope.findings.abtest import experiment_text
    from latscope.results import ABResult, section
    from latscope.campaign.experiment import Experiment
    from latscope.report.diagnose import _experiment_lines

    # the local vLLM with 2 sequences a batch at c=16: short TTFT -76%, long E2E +114%
    proposal = Proposal("latency.queue", Change(), metric="short_ttft_mean_ms",
                        guard="long_e2e_mean_ms", gateway={"policy": "sjf", "max_inflight": None})
    exp = Experiment(proposal, 16, a_values=[900.0, 1000.0, 950.0, 1100.0],
                     b_values=[210.0, 250.0, 220.0, 260.0], arms=["A", "B"] * 4,
                     guard_values={"A": [2000.0, 2100.0, 1900.0, 2050.0],
                                   "B": [4300.0, 4400.0, 4100.0, 4500.0]})
    from latscope.analysis.tune import paired_change
    exp.result = paired_change(exp.a_values, exp.b_values, higher_better=False)
    result = exp.ab_result().to_dict()
    assert result["helped"] and result["guard"]["verdict"] == "worse"
    from latscope.report.html import render_html
    from latscope.report.markdown import render_markdown
    from latscope.report.write import typed_report

    from report_samples import bare_report  # tests/, on the path above

    report = {**bare_report(), "experiments": [result]}
    assert "helped, at a cost" in render_markdown(typed_report(report))
    assert "helped, at a cost" in render_html(typed_report(report))
    assert "helped, at a cost" in experiment_text(section(result, ABResult))
    assert "long_e2e_mean_ms +" in experiment_text(section(result, ABResult))
    typed = typed_report(report).experiments
    assert any("helped, at a cost" in line for line in _experiment_lines(typed, 80))


@pytest.mark.parametrize("argv, message", [
    (["--mix", "short:0.9:16"], "bad mix entry"),
    (["--dataset", "/no/such/prompts.jsonl"], "--dataset /no/such/prompts.jsonl: no such file"),
])
def test_diagnose_refuses_a_bad_workload_before_starting_a_server(argv, message, capsys):
    from latscope.cli.main import main

    assert main(["diagnose", *argv]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "starting" not in err


class _Budget:
    def __init__(self, left_s: float) -> None:
        self.left_s = left_s

    def left(self) -> float:
        return self.left_s


def _state_with_throughput(rps: float | None, pairs: int = 4):
    from types import SimpleNamespace

    obs = SimpleNamespace(summary=bench_summary(throughput={"requests_per_s": rps}))
    return SimpleNamespace(observations={16.0: obs}, opts=SimpleNamespace(pairs=pairs))


@pytest.mark.parametrize("left_s, restart, expected", [
    (1000.0, False, 4),  # room for all that were asked
    (180.0, False, 2),   # a run at c=16: (64 + 16) requests at 2 req/s + 3 s = 43 s
    (80.0, False, 0),    # less than one pair: nothing run, the fix only proposed
    (300.0, True, 1),    # a server start of 60 s in every run: 103 s a run
])
def test_ab_pairs_are_cut_to_the_budget_left(left_s, restart, expected):
    from latscope.campaign.proofs import _pairs_that_fit

    class Control(_NoControl):
        concurrent_arms = not restart

    current = Running(url="http://127.0.0.1:1", model=None, pid=None, log_path=None,
                      tokenizer_dir=None, start_s=60.0)
    proposal = Proposal("server.queue_max_num_seqs", Change(flags=("--max-num-seqs", "8")))
    assert _pairs_that_fit(_state_with_throughput(2.0), proposal, Control(), current, 16,
                           _Budget(left_s)) == expected
    # the gateway's B arm is a gateway in front of the running server: never a restart
    gateway = Proposal("server.queue_max_num_seqs", Change(), gateway={"policy": "sjf"})
    assert _pairs_that_fit(_state_with_throughput(2.0), gateway, Control(), current, 16,
                           _Budget(180.0)) == 2


def test_a_gateways_longer_runs_are_what_the_budget_is_cut_for():
    from latscope.campaign.proofs import _pairs_that_fit

    current = Running(url="http://127.0.0.1:1", model=None, pid=None, log_path=None,
                      tokenizer_dir=None, start_s=0.0)
    # (144 + 29) requests at 2 req/s + 3 s = 89.5 s a run: 180 s hold one pair, not two
    gateway = Proposal("x", Change(), gateway={"policy": "sjf"}, requests=144, warmup=29)
    assert _pairs_that_fit(_state_with_throughput(2.0), gateway, _NoControl(), current, 16,
                           _Budget(180.0)) == 1
    assert _pairs_that_fit(_state_with_throughput(2.0), gateway, _NoControl(), current, 16,
                           _Budget(360.0)) == 2


def test_diagnose_sizes_the_gateways_runs_from_the_sweeps_run_at_that_load():
    from types import SimpleNamespace

    from latscope.campaign.proofs import _size_runs_for_aging

    records = [_record(i, 32, 8, 10.0, 50.0) for i in range(90)]
    records += [_record(90 + i, 512, 256, 40.0, 400.0) for i in range(10)]
    obs = SimpleNamespace(records=records, summary=bench_summary(throughput={
        "requests_per_s": 4.2, "total_tokens_per_s": 450.0}))
    proposal = Proposal("x", Change(), gateway={"policy": "sjf"})
    _size_runs_for_aging(proposal, obs, 16)
    assert (proposal.requests, proposal.warmup) == (144, 29)  # 5 and 1 horizons of 6.8 s
    assert "6.8 s" in proposal.note
    untouched = Proposal("x", Change(), gateway={"policy": "sjf"})
    _size_runs_for_aging(untouched, None, 16)  # no sweep run there: the default length
    assert (untouched.requests, untouched.warmup, untouched.note) == (None, None, "")


def test_a_long_class_the_sweeps_run_sent_too_few_of_still_sets_the_run_length():
    # a CI step of 32 requests of a 90/10 mix sent one long request: the measured p95 was a short
    # one's, and the runs were cut to the minimum; the workload's own definition says otherwise
    from types import SimpleNamespace

    from latscope.campaign.proofs import _size_runs_for_aging
    from latscope.load.config import WorkloadSpec, parse_mix

    records = [_record(i, 32, 8, 10.0, 50.0) for i in range(31)]
    records += [_record(31, 256, 128, 40.0, 400.0)]
    spec = WorkloadSpec(mix=parse_mix("short:0.9:32:8,long:0.1:256:128"))
    summary = bench_summary(throughput={"requests_per_s": 20.0, "total_tokens_per_s": 1500.0})
    planned = Proposal("x", Change(), gateway={"policy": "sjf"})
    _size_runs_for_aging(planned, SimpleNamespace(
        records=records, summary=summary, result=SimpleNamespace(config=SimpleNamespace(
            workload=spec))), 16)
    measured_only = Proposal("x", Change(), gateway={"policy": "sjf"})
    _size_runs_for_aging(measured_only, SimpleNamespace(records=records, summary=summary), 16)
    assert planned.requests > measured_only.requests  # five horizons of a 384-token request
    assert planned.requests >= 5 * 20.0 * (384 / 1500.0)


def test_ab_pairs_without_a_measured_throughput_are_as_asked_once_20_s_are_left():
    from latscope.campaign.proofs import _pairs_that_fit

    current = Running(url="http://127.0.0.1:1", model=None, pid=None, log_path=None,
                      tokenizer_dir=None, start_s=0.0)
    proposal = Proposal("x", Change())
    state = _state_with_throughput(None, pairs=3)
    assert _pairs_that_fit(state, proposal, _NoControl(), current, 16, _Budget(25.0)) == 3
    assert _pairs_that_fit(state, proposal, _NoControl(), current, 16, _Budget(10.0)) == 0


def test_the_proposed_gateway_command_carries_the_flags_of_the_change():
    from latscope.campaign.proofs import _gateway_proposal
    from latscope.model import Finding, Severity

    f = Finding("server.queue_max_num_seqs", Severity.WARNING, "batch full", layer="queue")
    p = Proposal(f.id, Change(), metric="short_ttft_mean_ms", guard="long_e2e_mean_ms",
                 why="queueing dominates",
                 gateway={"policy": "sjf", "max_inflight": None, "initial_inflight": 64})
    out = _gateway_proposal(f, p, "http://127.0.0.1:8000", "no time left")
    assert out.change == ("latscope gateway --policy sjf --max-inflight auto "
                          "--initial-inflight 64")
    assert out.command == ("latscope gateway --upstream http://127.0.0.1:8000 --policy sjf "
                              "--max-inflight auto --initial-inflight 64")


def _ab_with_stalls(tmp_path, monkeypatch, stalled: set[int]) -> tuple[list, dict]:
    """A 2-pair A/B against the fake server whose observe() calls numbered in ``stalled``
    (1-based) report the client's timing unreliable, and every other call reliable: the stall
    is injected, it cannot be planted, and the box's own load must not add one (4 xdist
    workers on 2 cores once made a re-run read unreliable for real, #22)."""
    import latscope.campaign.experiment as experiment

    real, calls = experiment.observe, []

    def observe(cfg, **kw):
        obs = real(cfg, **kw)
        calls.append(cfg.output_dir)
        if len(calls) in stalled:
            obs.client = dataclasses.replace(obs.client, reliable=False,
                                             why="event-loop lag p99 770 ms")
        else:
            obs.client = dataclasses.replace(obs.client, reliable=True)
        return obs

    monkeypatch.setattr(experiment, "observe", observe)
    with FakeServer(ttft_ms=5, itl_ms=1) as server:
        base = BenchConfig(url=server.url, workload=WorkloadSpec(input_len=16, output_len=4))
        current = Running(url=server.url, model=None, pid=None, log_path=None,
                          tokenizer_dir=None, start_s=0.0)
        proposal = Proposal("server.queue_max_num_seqs", Change(), metric="ttft_mean_ms",
                            gateway={"policy": "fcfs"}, requests=12, warmup=2)
        result = run_experiment(proposal, _NoControl(), current, base, 2, tmp_path, pairs=2,
                                scrape_interval_s=0).ab_result().to_dict()
    return calls, result


@pytest.mark.slow
def test_a_run_whose_client_timing_was_unreliable_is_measured_again(tmp_path, monkeypatch):
    # CI's 2-core box stalled latscope's event loop 830 ms in one B run of the max_num_seqs
    # A/B (TTFT 183 ms against 14-22 ms in the other B runs): that run is measured again with
    # fresh prompts and the first one kept on disk
    calls, result = _ab_with_stalls(tmp_path, monkeypatch, {2})  # the first B run
    assert [Path(d).name for d in calls] == ["00-A", "00-B", "00-B-again", "01-A", "01-B"]
    assert result["reruns"] == [{"run": "00-B", "why": "event-loop lag p99 770 ms"}]
    assert [Path(d).name for d in result["run_dirs"]] == ["00-A", "00-B-again", "01-A", "01-B"]
    assert len(result["b_values"]) == 2 and "measured again" in result["note"]
    assert (tmp_path / "00-B" / "summary.json").is_file()  # the first run is kept, not lost
    seeds = [json.loads((Path(d) / "manifest.json").read_text())["config"]["seed"]
             for d in calls]
    assert len(set(seeds)) == len(seeds)  # the re-run's prompts are not the first run's
    assert result["client_unreliable_runs"] == [] and "own timing" not in result["note"]


@pytest.mark.slow
def test_runs_kept_with_unreliable_client_timing_are_named_in_the_note(tmp_path, monkeypatch):
    # a loaded 2-core box: 4-6 of 8 runs unreliable; one re-run is allowed, the rest are kept
    # as measured, and the A/B says which, instead of giving its interval as if clean
    calls, result = _ab_with_stalls(tmp_path, monkeypatch, {2, 3, 4})
    assert [Path(d).name for d in calls] == ["00-A", "00-B", "00-B-again", "01-A", "01-B"]
    assert result["client_unreliable_runs"] == ["00-B-again", "01-A"]
    assert "client's own timing was unreliable in 2 of 4 runs (00-B-again, 01-A)" in (
        result["note"])
