"""`latscope tune --local --parallel 2` on the real local vLLM: two trials, two servers at once
(each ~2.5 GiB on the CPU build), each on its own port, both stopped afterwards.

Short on purpose: a grid of two values, so the two trials form one batch and start together.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from latscope.campaign.parallel_tune import visible_gpus

REPO = Path(__file__).resolve().parents[2]
# untimed: what its processes did, never a timing or a verdict (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.untimed]


def test_tune_parallel_runs_two_local_servers_at_once(tmp_path):
    out = tmp_path / "tune"
    cmd = [sys.executable, "-m", "latscope", "tune", "--local", "--param", "max_num_seqs=1,4",
           "--search", "grid", "--parallel", "2", "--concurrency", "4", "-n", "12",
           "--input-len", "16", "--output-len", "8", "--warmup", "2", "-o", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if not visible_gpus()[0]:
        assert "warning: --parallel 2 on a host without GPUs" in proc.stderr
    state = json.loads(proc.stdout)
    trials = state["trials"]
    assert [t["status"] for t in trials] == ["done", "done"]
    assert sorted(t["config"]["max_num_seqs"] for t in trials) == [1, 4]
    a, b = trials
    assert a["started"] < b["finished"] and b["started"] < a["finished"]  # they ran at once
    assert all(t["metrics"]["requests_total"] == 12 for t in trials)
    ports = []
    for t in trials:
        logs = list((out / t["run_dir"]).glob("vllm-*.log"))
        assert len(logs) == 1
        ports.append(int(re.search(r"-(\d+)\.log$", logs[0].name)[1]))
    assert len(set(ports)) == 2  # a server of its own for each trial
    assert not any(_listening(p) for p in ports)  # and each stopped when its trial ended
    assert state["result"]["restarts"] == 2


def _listening(port: int) -> bool:
    """Something accepts on 127.0.0.1:port (a bind test would fail on TIME_WAIT alone)."""
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0
