"""bench --ray and trace --ray against a real local Ray cluster: a head node and one worker node
(``ray start``, one CPU each), as a user would start a small cluster.

Why the start is arranged as it is (Ray 2.60, measured on a 2-core box at load 11-17):

- The raylet gives the dashboard agent a fixed 15 s (not configurable: neither
  ``RAY_raylet_start_wait_time_s`` nor ``RAY_agent_register_timeout_ms`` moves it) to write its
  port files, and aborts otherwise (raylet.out: ``Check failed: ... Timed out waiting for file
  .../metrics_agent_port_<node>``). The agent writes them right after ``import ray``. Where
  ``rfc3987-syntax`` is installed (``jsonschema[format-nongpl]``, pulled in by Jupyter), that
  import builds ~40 Earley parsers: 3.2 s CPU instead of 0.8 s, 13 s wall under that load, so
  the raylet died. The nodes started here therefore see a ``rfc3987_syntax`` that raises
  ImportError (tests/shims, on the PYTHONPATH of the whole test session: tests/conftest.py),
  which jsonschema treats as the optional package being absent; nothing in Ray or latscope
  checks the ``iri`` format.
- The agent ports are left to the agent (0): the raylet then waits for the three files one
  after the other, 15 s each, instead of one 15 s window for the last of them.
- No log monitor (``--include-log-monitor=false``), no dashboard: fewer Python processes
  importing Ray at once. Own ports for the GCS, the Ray client server and the agents' HTTP, own
  temp dirs: other Ray clusters on the machine are neither joined nor disturbed.
- A node whose start fails is started once more; if the cluster still does not come up, the
  tests are skipped with the raylet's own line (a box too loaded for Ray, not a latscope fault).

Ray advertises the host's routable address even for ``--node-ip-address 127.0.0.1``
(``services.resolve_ip_for_localhost``): a node on 127.0.0.1 could not be joined by others.
All traffic here stays on this host. The cluster is stopped by the process groups this fixture
started (each ``ray start --block`` runs in its own session, so its raylet, GCS, agents and
workers share its group) - never by ``ray stop``, which would stop every Ray process of this
user on the machine.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:  # find_spec: importing Ray here costs seconds
    pytest.skip("the ray extra is not installed (pip install 'latscope[ray]')",
                allow_module_level=True)

from fakeserver import FakeServer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# untimed: what its processes did, never a timing or a verdict (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.untimed]
_START_TIMEOUT_S = 150
_ATTEMPTS = 2


class ClusterDidNotStart(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster_env() -> dict[str, str]:
    """The environment of the nodes and of the latscope drivers: the session's, whose
    PYTHONPATH holds this checkout's latscope and, where it is installed, hides
    ``rfc3987_syntax`` (tests/conftest.py; see the module docstring)."""
    return dict(os.environ)


def _start_node(args: list[str], temp_dir: Path, log: Path, env: dict[str, str]
                ) -> subprocess.Popen:
    ray_bin = Path(sys.executable).with_name("ray")
    cmd = [str(ray_bin) if ray_bin.exists() else "ray", "start", "--block",
           "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats",
           "--include-log-monitor=false", "--temp-dir", str(temp_dir),
           "--dashboard-agent-listen-port", str(_free_port()), *args]
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def _raylet_failure(temp_dir: Path) -> str:
    """The raylet's fatal line (``Check failed: ...``), if it wrote one."""
    for path in sorted(temp_dir.glob("session_*/logs/raylet.out")):
        for line in path.read_text(errors="replace").splitlines():
            if " C " in line[:60] or "Check failed" in line:
                return re.sub(r"^\[[^]]*\] \(raylet\) ", "", line).strip()[:400]
    return ""


def _wait_started(proc: subprocess.Popen, temp_dir: Path, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "block forever" in text:
            return
        if proc.poll() is not None or _raylet_failure(temp_dir):
            break
        time.sleep(0.5)
    else:
        raise ClusterDidNotStart(f"ray start did not come up in {_START_TIMEOUT_S} s ({log})")
    cause = _raylet_failure(temp_dir) or log.read_text(errors="replace").strip()[-400:]
    raise ClusterDidNotStart(f"ray start failed: {cause}")


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the group this fixture started, then SIGKILL what is left of it: Ray's own
    shutdown can take longer than the test is willing to wait."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
    try:  # the leader has exited; sweep its group (raylet, GCS, agents, workers)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _started_node(procs: list[subprocess.Popen], args: list[str], temp_dir: Path, log: Path,
                  env: dict[str, str]) -> None:
    """Starts one node, once more if the first start fails; appends each process to procs."""
    for attempt in range(1, _ATTEMPTS + 1):
        attempt_dir = temp_dir / str(attempt)
        procs.append(_start_node(args, attempt_dir, log, env))
        try:
            _wait_started(procs[-1], attempt_dir, log)
            return
        except ClusterDidNotStart:
            _stop_group(procs[-1])
            if attempt == _ATTEMPTS:
                raise


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    base = Path(f"/tmp/lsray-{os.getpid()}")  # short: Ray's unix socket paths must fit 107 chars
    base.mkdir(exist_ok=True)
    logs = tmp_path_factory.mktemp("raylogs")
    env = _cluster_env()
    port = _free_port()
    procs: list[subprocess.Popen] = []
    try:
        try:
            _started_node(procs, ["--head", "--port", str(port), "--include-dashboard=false",
                                  "--ray-client-server-port", str(_free_port())],
                          base / "h", logs / "head.log", env)
            _started_node(procs, ["--address", f"127.0.0.1:{port}"], base / "w",
                          logs / "node.log", env)
        except ClusterDidNotStart as exc:
            pytest.skip(f"the local Ray cluster did not start here: {exc}")
        yield f"127.0.0.1:{port}", env
    finally:
        for proc in reversed(procs):
            _stop_group(proc)
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _latscope(cluster_env: dict[str, str], *args: str, timeout: float = 300
              ) -> subprocess.CompletedProcess:
    env = {**cluster_env, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "latscope", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_bench_ray_merges_the_records_of_actors_on_both_nodes(ray_cluster, tmp_path):
    from latscope.load import read_run

    address, env = ray_cluster
    with FakeServer(ttft_ms=10, itl_ms=2) as srv:
        out = _latscope(env, "bench", "--url", srv.url, "--model", "fake-model", "-n", "40", "-c",
                        "4", "--input-len", "8", "--output-len", "4", "--ray", address,
                        "--workers", "2", "--no-progress", "--scrape-interval", "0",
                        "--output-dir", str(tmp_path / "run"))
        truth = srv.truth()
    assert out.returncode == 0, out.stderr + out.stdout
    manifest, records, summary = read_run(tmp_path / "run")
    measured = [r for r in records if not r.warmup]  # each actor's stagger ramp: warm-up
    assert len(measured) == 40 and len({r.request_id for r in records}) == len(records)
    assert all(r.ok and r.first_token_ns >= truth[r.request_id].chunk_ns[0] for r in records)
    workers = summary["workers"]
    assert [w["measured"] for w in workers] == [20, 20]
    assert len({w["node_id"] for w in workers}) == 2  # SPREAD: one actor per node
    clocks = manifest["workers"]["clocks"]
    assert all(abs(c["offset_ns"]) <= c["bound_ns"] for c in clocks)  # one host: offset ~0
    assert all(c["applied_ns"] == 0 for c in clocks)
    # each actor's statistics came back with its result (pickled) and were merged: the
    # summary is what its records give
    from latscope.stats import summarize
    again = summarize(records)
    assert summary["requests"] == again["requests"] and summary["requests"]["completed"] == 40
    assert summary["ttft_ms"]["p90"] == again["ttft_ms"]["p90"]


def test_trace_ray_analyses_rank_files_as_tasks(ray_cluster, tmp_path, fixtures_dir):
    import json
    import shutil

    src = fixtures_dir / "traces" / "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz"
    ranks = []
    for i in range(2):
        ranks.append(tmp_path / f"rank{i}.pt.trace.json.gz")
        shutil.copy(src, ranks[-1])
    address, env = ray_cluster
    out = _latscope(env, "trace", *map(str, ranks), "--ray", address, "--quiet",
                    "-o", str(tmp_path / "t.json"))
    assert out.returncode == 0, out.stderr + out.stdout
    view = json.loads((tmp_path / "t.json" / "trace.json").read_text())["cross_rank"]
    assert len(view["ranks"]) == 2
    assert len({w["pid"] for w in view["workers"]}) == 2  # max_calls=1: a process per trace
    assert view["collectives"]["matched"] > 0
    assert view["collectives"]["skew_max_ms"] == 0  # identical copies: no skew at all


def test_tune_ray_runs_trials_as_tasks_on_both_nodes(ray_cluster, tmp_path):
    """Two trials of a grid as two Ray tasks (one CPU each: one per node here), each starting
    its own tests/fakeserver.py on its node; the smaller inter-token gap wins."""
    import json

    address, env = ray_cluster
    fake = REPO / "tests" / "fakeserver.py"
    out = _latscope(env, "tune", "--serve-cmd",
                    f"{sys.executable} {fake} --port {{port}} --ttft-ms 5 --itl-ms {{itl_ms}}",
                    "--health-path", "/v1/models", "--param", "itl_ms=1,8", "--search", "grid",
                    "--concurrency", "4", "-n", "16", "--input-len", "8", "--output-len", "8",
                    "--parallel", "2", "--ray", address, "-o", str(tmp_path / "tune"), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    state = json.loads(out.stdout)
    trials = state["trials"]
    assert [t["status"] for t in trials] == ["done", "done"]
    assert len({t["node"] for t in trials}) == 2  # one task per node
    a, b = trials
    assert a["started"] < b["finished"] and b["started"] < a["finished"]
    assert state["result"]["best"] == {"itl_ms": 1}
