"""bench --ray and trace --ray against a real local Ray cluster on loopback: a head node and one
worker node (``ray start``, one CPU each), as a user would start a small cluster.

The cluster is stopped by the process groups this fixture started (each ``ray start --block``
runs in its own session, so its raylet, GCS and workers share that group) - never by ``ray stop``,
which would stop every Ray process of this user on the machine. Each node gets its own temp dir
and ports, so other Ray clusters on the box are neither joined nor touched.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'latscope[ray]')")

from fakeserver import FakeServer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
_START_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_node(args: list[str], log: Path) -> subprocess.Popen:
    ray_bin = Path(sys.executable).with_name("ray")
    cmd = [str(ray_bin) if ray_bin.exists() else "ray", "start", "--block",
           "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats", *args]
    env = {**os.environ, "RAY_raylet_start_wait_time_s": "180"}
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _wait_started(proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "block forever" in text:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited {proc.returncode}: {text[-800:]}")
        time.sleep(0.5)
    raise RuntimeError(f"ray start did not come up in {_START_TIMEOUT_S} s: {log}")


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the group this fixture started, then SIGKILL what is left of it."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    base = Path(f"/tmp/lsray-{os.getpid()}")  # short: Ray's unix socket paths must fit 107 chars
    base.mkdir(exist_ok=True)
    logs = tmp_path_factory.mktemp("raylogs")
    port = _free_port()
    ports = ["--dashboard-agent-grpc-port", str(_free_port()),
             "--dashboard-agent-listen-port", str(_free_port()),
             "--runtime-env-agent-port", str(_free_port()),
             "--metrics-export-port", str(_free_port())]
    head = _start_node(["--head", "--port", str(port), "--include-dashboard=false",
                        "--temp-dir", str(base / "h"), *ports], logs / "head.log")
    procs = [head]
    try:
        _wait_started(head, logs / "head.log")
        node_ports = ["--dashboard-agent-grpc-port", str(_free_port()),
                      "--dashboard-agent-listen-port", str(_free_port()),
                      "--runtime-env-agent-port", str(_free_port()),
                      "--metrics-export-port", str(_free_port())]
        node = _start_node(["--address", f"127.0.0.1:{port}", *node_ports], logs / "node.log")
        procs.append(node)
        _wait_started(node, logs / "node.log")
        yield f"127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            _stop_group(proc)
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _latscope(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "latscope", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_bench_ray_merges_the_records_of_actors_on_both_nodes(ray_cluster, tmp_path):
    from latscope.load import read_run

    with FakeServer(ttft_ms=10, itl_ms=2) as srv:
        out = _latscope("bench", "--url", srv.url, "--model", "fake-model", "-n", "40", "-c",
                        "4", "--input-len", "8", "--output-len", "4", "--ray", ray_cluster,
                        "--workers", "2", "--no-progress", "--scrape-interval", "0",
                        "--output-dir", str(tmp_path / "run"))
        truth = srv.truth()
    assert out.returncode == 0, out.stderr + out.stdout
    manifest, records, summary = read_run(tmp_path / "run")
    assert len(records) == 40 and len({r.request_id for r in records}) == 40
    assert all(r.ok and r.first_token_ns >= truth[r.request_id].chunk_ns[0] for r in records)
    workers = summary["workers"]
    assert [w["requests"] for w in workers] == [20, 20]
    assert len({w["node_id"] for w in workers}) == 2  # SPREAD: one actor per node
    clocks = manifest["workers"]["clocks"]
    assert all(abs(c["offset_ns"]) <= c["bound_ns"] for c in clocks)  # one host: offset ~0
    assert all(c["applied_ns"] == 0 for c in clocks)


def test_trace_ray_analyses_rank_files_as_tasks(ray_cluster, tmp_path, fixtures_dir):
    import json
    import shutil

    src = fixtures_dir / "traces" / "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz"
    ranks = []
    for i in range(2):
        ranks.append(tmp_path / f"rank{i}.pt.trace.json.gz")
        shutil.copy(src, ranks[-1])
    out = _latscope("trace", *map(str, ranks), "--ray", ray_cluster, "--quiet",
                    "-o", str(tmp_path / "t.json"))
    assert out.returncode == 0, out.stderr + out.stdout
    view = json.loads((tmp_path / "t.json").read_text())["cross_rank"]
    assert len(view["ranks"]) == 2
    assert len({w["pid"] for w in view["workers"]}) == 2  # max_calls=1: a process per trace
    assert view["collectives"]["matched"] > 0
    assert view["collectives"]["skew_max_ms"] == 0  # identical copies: no skew at all
