"""Tune: scoring, paired validation interval, state file, and a real tune interrupted and resumed.

The end-to-end tests start ``tests/fakeserver.py`` (a real HTTP server whose inter-token gap is a
command-line flag) through ``latscope tune --serve-cmd``: with closed-loop load its throughput
falls as ``--itl-ms`` grows, so the best of ``itl_ms=1..8`` is known in advance (1 ms).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from latscope.analysis.knee import parse_slo
from latscope.analysis.search import Param
from latscope.analysis.tune import (
    Trial,
    TuneSpec,
    TuneState,
    flag_args,
    paired_change,
    score,
)
from latscope.campaign.tune import serve_command
from latscope.errors import ConfigError

FAKE_SERVER = Path(__file__).resolve().parents[2] / "fakeserver.py"


def _spec(**kw) -> TuneSpec:
    base = dict(params=[Param("max_num_seqs", (1, 2, 4, 8))], serve_cmd=None, local=True, slo="",
                workload={"concurrency": "4"})
    return TuneSpec(**{**base, **kw})


def test_score_feasible_is_throughput_and_infeasible_is_minus_violation():
    slo = parse_slo("ttft_p99_ms<=100")
    assert score({"requests_per_s": 5.0, "ttft_p99_ms": 50}, slo, "requests_per_s", 0.05) \
        .value == 5.0
    miss = score({"requests_per_s": 9.0, "ttft_p99_ms": 150}, slo, "requests_per_s", 0.05)
    assert not miss.feasible and miss.value == pytest.approx(-0.5)  # 50% over the limit
    worse = score({"requests_per_s": 9.0, "ttft_p99_ms": 300}, slo, "requests_per_s", 0.05)
    assert worse.value < miss.value
    errors = score({"requests_per_s": 9.0, "error_rate": 0.5}, [], "requests_per_s", 0.05)
    assert not errors.feasible


def test_paired_change_interval_and_verdicts():
    # Candidate 20% better every time, with a little spread: the interval excludes zero.
    up = paired_change([100, 102, 98, 101], [120, 121, 119, 122], higher_better=True)
    assert up.verdict == "better"
    assert up.ci[0] < up.change < up.ci[1]
    assert up.change == pytest.approx(0.2, abs=0.02)
    # Mixed ratios around 1: no significant difference.
    same = paired_change([100, 100, 100], [110, 90, 101], higher_better=True)
    assert same.verdict == "no significant difference"
    # Lower latency is the good direction.
    assert paired_change([50, 52, 51], [40, 41, 40], higher_better=False).verdict == "better"
    assert paired_change([100], [120], higher_better=True).ci is None


def test_paired_change_matches_a_textbook_t_interval():
    # Log ratios 0.1, 0.2, 0.3: mean 0.2, sd 0.1, t(0.975, 2) = 4.303 -> 0.2 +- 0.2484.
    base = [1.0, 1.0, 1.0]
    cand = [math.exp(0.1), math.exp(0.2), math.exp(0.3)]
    res = paired_change(base, cand, higher_better=True)
    half = 4.302653 * 0.1 / math.sqrt(3)
    assert res.ci == pytest.approx([math.expm1(0.2 - half), math.expm1(0.2 + half)], rel=1e-5)


def test_serve_command_fills_placeholders_and_refuses_untuned_flags():
    cmd = serve_command("vllm serve m --port {port} --max-num-seqs {max_num_seqs}",
                        {"max_num_seqs": 8}, 9000)
    assert cmd == ["vllm", "serve", "m", "--port", "9000", "--max-num-seqs", "8"]
    with pytest.raises(ConfigError, match="no placeholder"):
        serve_command("vllm serve m --port {port}", {"max_num_seqs": 8}, 1)
    with pytest.raises(ConfigError, match="match no --param"):
        serve_command("vllm serve {model} --max-num-seqs {max_num_seqs}", {"max_num_seqs": 8}, 1)
    assert flag_args({"max_num_batched_tokens": 2048}) == ["--max-num-batched-tokens", "2048"]


def test_secret_in_serve_cmd_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "tune"
    proc = subprocess.run([sys.executable, "-m", "latscope", "tune", "--serve-cmd",
                           "vllm serve m --api-key s3cret --max-num-seqs {max_num_seqs}",
                           "--param", "max_num_seqs=1,2", "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "secret" in proc.stderr
    assert "s3cret" not in proc.stderr + proc.stdout
    assert not out.exists()


def test_state_round_trip_and_only_finished_trials_are_reused(tmp_path):
    state = TuneState(tmp_path, _spec())
    state.trials = [Trial(config={"max_num_seqs": 1}, status="done", feasible=True, value=3.0,
                          metrics={"requests_per_s": 3.0}, decomposition={"ttft": 40.0}),
                    Trial(config={"max_num_seqs": 2}, status="failed",
                          error="did not start"),  # value -inf
                    Trial(config={"max_num_seqs": 4}, status="running"),
                    Trial(config={"max_num_seqs": 8}, status="interrupted")]
    state.save()
    assert not list(tmp_path.glob(".*tmp"))  # the atomic write left nothing behind
    written = json.loads((tmp_path / "tune.json").read_text())
    assert written["version"] == 2 and written["trials"][1]["value"] == "-inf"
    again = TuneState.load(tmp_path)
    assert again.spec == state.spec and again.trials == state.trials
    assert again.trials[1].value == -math.inf
    assert set(again.cache()) == {(1,), (2,)}


def test_a_version_1_state_is_read_with_its_decomposition_and_sweep_moved(tmp_path):
    # version 1 kept a trial's decomposition and per-trial sweep among its metrics
    state = TuneState(tmp_path, _spec())
    state.trials = [Trial(config={"max_num_seqs": 1}, status="done", feasible=True, value=3.0)]
    state.save()
    data = json.loads((tmp_path / "tune.json").read_text())
    data["version"] = 1
    trial = data["trials"][0]
    trial["metrics"] = {"requests_per_s": 3.0, "load": 4, "decomposition": {"ttft": 40.0},
                        "sweep": [{"load": 1, "requests_per_s": 1.0},
                                  {"load": 4, "requests_per_s": 3.0}]}
    for key in ("decomposition", "sweep"):
        trial.pop(key)
    (tmp_path / "tune.json").write_text(json.dumps(data))
    [old] = TuneState.load(tmp_path).trials
    assert old.metrics == {"requests_per_s": 3.0, "load": 4}
    assert old.decomposition == {"ttft": 40.0}
    assert [(s.load, s.value) for s in old.sweep] == [(1, 1.0), (4, 3.0)]


def test_load_refuses_missing_or_foreign_state(tmp_path):
    with pytest.raises(ConfigError, match="nothing to resume"):
        TuneState.load(tmp_path)
    (tmp_path / "tune.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not a tune state"):
        TuneState.load(tmp_path)


def _tune_cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "latscope", "tune",
            "--serve-cmd", f"{sys.executable} {FAKE_SERVER} --port {{port}} --ttft-ms 5 --itl-ms {{itl_ms}}",
            "--health-path", "/v1/models", "--param", "itl_ms=1..8", "--start", "itl_ms=2",
            "--concurrency", "4", "-n", "24", "--input-len", "8", "--output-len", "16",
            "-o", str(out), *extra]


def _children_of(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _all_stopped(pids: list[int], timeout_s: float = 30.0) -> bool:
    """Every pid gone or a zombie: a child of the tune process that was stopped is reaped by
    whoever inherits it once the tune exits (PID 1 in a container, in its own time; CI's 2-core
    box saw /proc/PID still there right after the exit), so wait on that, never a fixed time."""
    from latscope.server.process import process_start_ticks

    deadline = time.monotonic() + timeout_s
    while any(process_start_ticks(pid) is not None for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow
def test_tune_finds_best_with_fewer_restarts_than_grid(tmp_path):
    out = tmp_path / "tune"
    proc = subprocess.run(_tune_cmd(out, "--json"), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    state = json.loads(proc.stdout)
    result = state["result"]  # the file's
    assert result["best"] == {"itl_ms": 1}  # the smallest gap gives the most requests/s
    assert result["grid_size"] == 4 and result["restarts"] < 4
    assert result["baseline"] == {"itl_ms": 2}
    assert all((out / t["run_dir"] / "server.log").exists() for t in state["trials"])


@pytest.mark.slow
def test_interrupted_tune_keeps_its_trials_stops_its_server_and_resumes(tmp_path):
    out = tmp_path / "tune"
    proc = subprocess.Popen(_tune_cmd(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    state_file = out / "tune.json"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # wait until one trial is done and the next is running
            if state_file.exists():
                trials = json.loads(state_file.read_text())["trials"]
                if len(trials) >= 2 and trials[0]["status"] == "done" and \
                        trials[-1]["status"] == "running" and _children_of(proc.pid):
                    break
            time.sleep(0.05)
        else:
            pytest.fail("tune never got to its second trial")
        server_pids = _children_of(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert _all_stopped(server_pids)  # its server (and whatever else it started) was stopped
    trials = json.loads(state_file.read_text())["trials"]
    assert trials[0]["status"] == "done"
    assert trials[-1]["status"] == "interrupted"

    resumed = subprocess.run([sys.executable, "-m", "latscope", "tune", "--resume", str(out), "--json"],
                             capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(resumed.stdout)
    search = [t for t in final["trials"] if t["status"] == "done"]
    configs = [t["config"]["itl_ms"] for t in search]
    assert len(configs) == len(set(configs))  # the finished trial was not run again
    assert final["result"]["best"] == {"itl_ms": 1}
    assert final["result"]["restarts"] < final["result"]["grid_size"]


@pytest.mark.parametrize("extra, message", [
    (["--start", "max_num_seqs=abc"], "--start"),
    (["--concurrency", "1,4"], "--per-trial sweep"),
    (["--concurrency", "abc"], "--per-trial fixed"),
    (["--slo", "ttft_p99_ms<=y"], "bad --slo term"),
    (["--scrape-interval", "0"], "--scrape-interval"),
])
def test_bad_tune_flags_fail_before_tune_json_or_a_server(tmp_path, capsys, extra, message):
    from latscope.cli.main import main

    out = tmp_path / "t"
    # "false" would only run if a trial started; the flag error must come first
    assert main(["tune", "--serve-cmd", "false {port} --max-num-seqs {max_num_seqs}",
                 "--param", "max_num_seqs=8..64", "-o", str(out), *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert not (out / "tune.json").exists()


def test_a_tune_whose_only_trial_failed_exits_1_without_a_best(tmp_path, capsys):
    from latscope.cli.main import main

    out = tmp_path / "t"
    # "false" exits at once: the server of the only configuration never comes up
    rc = main(["tune", "--serve-cmd", "false {port} --max-num-seqs {max_num_seqs}",
               "--param", "max_num_seqs=8", "--ready-timeout", "20", "-o", str(out)])
    captured = capsys.readouterr()
    assert rc == 1
    assert captured.err.startswith("error: every trial failed (1); first: ")
    assert "best:" not in captured.out
    assert json.loads((out / "tune.json").read_text())["trials"][0]["status"] == "failed"
