"""`latscope sweep` and `latscope tune` end to end on the real local vLLM (small and bounded).

The sweep runs in-process against the session's ``vllm_target``. The tune starts its own servers
(two full vLLM starts and one aborted one): it is interrupted with SIGINT while its second
server is starting, must stop that server's whole process group, and must resume from
``tune.json`` without repeating the finished trial. That the search needs fewer restarts than
the grid is a property of the search, shown on a fake server whose timing is known
(tests/unit/analysis/test_tune.py); a grid big enough to show it here cost a third vLLM start
(~35 s, #22).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from latscope.cli.main import main
from latscope.server.process import group_members

pytestmark = pytest.mark.integration


def _ok_measured(run_dir: Path) -> int:
    lines = (run_dir / "requests.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines if line.strip()]
    return sum(1 for r in recs if not r.get("warmup") and r.get("error_kind") is None
               and r.get("end_ns") is not None)


def test_sweep_auto_grows_stops_and_recommends(vllm_target, tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["sweep", "--url", vllm_target.url, "--concurrency", "auto", "--max-load", "16",
                 "-n", "16", "--input-len", "32", "--output-len", "16", "--refine", "1",
                 "--scrape-interval", "0.5", "-o", str(out), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads((out / "sweep.json").read_text())  # what was printed is on disk
    steps = doc["steps"]
    grow = [s["load"] for s in steps if s["phase"] == "grow"]
    assert grow[:2] == [1, 2] and all(b == 2 * a for a, b in zip(grow, grow[1:]))  # x2 from 1
    assert any(s["stop_reason"] for s in steps)  # it stopped early, and says why
    for s in steps:
        # Each step is a real bench run: its throughput counts the requests on disk.
        run_dir = Path(s["run_dir"])
        assert s["metrics"]["requests_total"] == 16
        assert _ok_measured(run_dir) == 16 - s["metrics"]["requests_failed"]
        # /metrics was scraped during the step, so the server-side split exists.
        assert s["decomposition"].get("ttft.server.prefill", 0) > 0
    analysis = doc["analysis"]
    ids = {f["id"] for f in doc["findings"]}
    if analysis["knee"] is not None:
        assert analysis["knee"]["load"] in {s["load"] for s in steps}
        assert analysis["recommended"] <= analysis["knee"]["load"]
        assert "sweep.knee" in ids
    else:
        assert "sweep.no_knee" in ids


def _children(pid: int) -> list[int]:
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


@pytest.mark.untimed
def test_tune_local_restarts_vllm_per_trial_and_resumes_after_interrupt(tmp_path):
    out = tmp_path / "tune"
    cmd = [sys.executable, "-m", "latscope", "tune", "--local", "--param", "max_num_seqs=2,8",
           "--start", "max_num_seqs=2", "--concurrency", "8", "-n", "24", "--input-len", "32",
           "--output-len", "16", "--warmup", "4", "-o", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    state_file = out / "tune.json"
    server_groups: list[int] = []
    try:
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline:
            if state_file.exists():
                trials = json.loads(state_file.read_text())["trials"]
                if len(trials) >= 2 and trials[0]["status"] == "done" and \
                        trials[-1]["status"] == "running" and (kids := _children(proc.pid)):
                    server_groups = [os.getpgid(k) for k in kids]
                    break
            if proc.poll() is not None:
                pytest.fail(f"tune ended early: {proc.communicate()[1][-2000:]}")
            time.sleep(0.2)
        else:
            pytest.fail("tune never reached its second trial")
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert server_groups and all(not group_members(g) for g in server_groups)
    first = json.loads(state_file.read_text())["trials"]
    assert first[0]["status"] == "done" and first[-1]["status"] == "interrupted"

    resumed = subprocess.run([sys.executable, "-m", "latscope", "tune", "--resume", str(out), "--json"],
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    state = json.loads(resumed.stdout)
    done = [t for t in state["trials"] if t["status"] == "done"]
    configs = [t["config"]["max_num_seqs"] for t in done]
    assert len(configs) == len(set(configs))  # the finished trial was not repeated
    result = state["result"]
    assert sorted(configs) == [2, 8]  # the interrupted trial was run again, to the end
    assert result["grid_size"] == 2 and result["restarts"] == 2  # a vLLM start per trial
    assert result["baseline"] == {"max_num_seqs": 2}
    for t in done:
        assert t["metrics"]["requests_total"] == 24
        logs = list((out / t["run_dir"]).glob("vllm-*.log"))
        assert len(logs) == 1, logs  # the trial's own server
        log = logs[0].read_text(errors="replace")
        assert f"'max_num_seqs': {t['config']['max_num_seqs']}" in log  # the flag reached vLLM
