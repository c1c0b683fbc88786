"""Who used the CPUs during a run: real /proc reads, a child that burns a known CPU time."""

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import msgspec

from latscope.env.hostload import (CoresUsed, HostCpu, HostLoadSampler, ProcTimes, cpu_usage,
                                   descendants, parse_stat, read_cpu_usage, read_procs)
from latscope.findings.host import contention_finding
from latscope.model import Severity

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

BURN = """
import sys, time
t0 = time.process_time()
while time.process_time() - t0 < 0.3:
    pass
print("burnt", flush=True)
sys.stdin.read()
"""


def test_a_command_with_spaces_and_parentheses_is_parsed_after_its_last_parenthesis():
    raw = "4242 (tmux: server (1)) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 1 0 777"
    p = parse_stat(raw, 100)
    assert (p.pid, p.ppid, p.comm, p.cpu_s, p.start) == (4242, 1, "tmux: server (1)", 3.0, 777)
    assert parse_stat("garbage", 100) is None


def test_the_live_proc_has_this_process_and_its_parent():
    procs = read_procs()
    import os

    me = procs[os.getpid()]
    assert me.ppid == os.getppid() and me.cpu_s > 0


def test_a_child_burning_300_ms_of_cpu_is_counted_as_another_process(tmp_path):
    sampler = HostLoadSampler(server_pids=set())
    ctx = SimpleNamespace(run_dir=tmp_path)
    child = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        asyncio.run(sampler.start(ctx))
        assert child.stdout.readline().strip() == "burnt"  # the event, not a sleep
        asyncio.run(sampler.stop(ctx))
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    usage = read_cpu_usage(tmp_path)
    # the child is latscope's (this process's) child: it counts as latscope, not as others
    assert usage.cores_used.latscope * usage.window_s >= 0.25
    assert all(o.pid != child.pid for o in usage.others)


def test_processes_split_into_latscope_server_and_others():
    before = {1: ProcTimes(1, 0, "init", 1.0), 10: ProcTimes(10, 1, "latscope", 5.0),
              11: ProcTimes(11, 10, "worker", 1.0), 20: ProcTimes(20, 1, "vllm", 10.0),
              21: ProcTimes(21, 20, "EngineCore", 3.0), 30: ProcTimes(30, 1, "burn", 0.0)}
    after = {1: ProcTimes(1, 0, "init", 1.0), 10: ProcTimes(10, 1, "latscope", 6.0),
             11: ProcTimes(11, 10, "worker", 2.0), 20: ProcTimes(20, 1, "vllm", 12.0),
             21: ProcTimes(21, 20, "EngineCore", 5.0), 30: ProcTimes(30, 1, "burn", 1.8),
             31: ProcTimes(31, 1, "new", 0.4),  # started during the window: counted from 0
             40: ProcTimes(40, 2, "kworker/1:1-events_power_efficient", 99.0)}  # a kthread
    before[40] = ProcTimes(40, 2, "kworker/1:1-events", 98.0)
    before[2] = after[2] = ProcTimes(2, 0, "kthreadd", 0.0)
    usage = cpu_usage(before, after, 2.0, own_pid=10, server_pids={20}, cores=4)
    assert usage.cores_used == CoresUsed(latscope=1.0, server=2.0, others=1.1)
    assert [(o.pid, o.cores) for o in usage.others] == [(30, 0.9), (31, 0.2)]
    assert descendants(after, {20}) == {20, 21}


def test_contention_is_critical_when_others_take_half_of_the_servers_cpus():
    data = {"cores": 16, "server_cpus": 4, "window_s": 10.0,
            "cores_used": {"latscope": 0.5, "server": 1.6, "others": 4.0},
            "others": [{"pid": 7, "comm": "python3", "cores": 1.0, "on_server_cpus": 1.0}] * 4}
    f = contention_finding(msgspec.convert(data, HostCpu), "c=8 (the knee)")
    assert f.severity == Severity.CRITICAL and f.id == "host.cpu_contention"
    assert "4.0 of the server's 4 CPUs (100%)" in f.title
    # the same processes pinned elsewhere do not contend
    elsewhere = {**data, "others": [{**o, "on_server_cpus": 0.0} for o in data["others"]]}
    assert contention_finding(msgspec.convert(elsewhere, HostCpu), "c=8").severity == Severity.OK
    assert contention_finding(HostCpu(skipped="no /proc"), "c=8") is None


def test_cpu_json_reads_back_as_written_and_a_foreign_one_is_one_line(tmp_path):
    import json

    from latscope.errors import ConfigError

    sampler = HostLoadSampler(server_pids={1})
    ctx = SimpleNamespace(run_dir=tmp_path)
    asyncio.run(sampler.start(ctx))
    asyncio.run(sampler.stop(ctx))
    written = json.loads((tmp_path / "host" / "cpu.json").read_text())
    assert list(written)[:3] == ["window_s", "cores", "server_cpus"] and written["server_pids"] == [1]
    assert read_cpu_usage(tmp_path) == sampler.result
    (tmp_path / "host" / "cpu.json").write_text('{"cores": "sixteen"}')
    with pytest.raises(ConfigError, match="cpu.json: not a CPU record latscope wrote"):
        read_cpu_usage(tmp_path)
