"""`diagnose` end to end against real local vLLM servers, one planted fault per server: the top
finding must name it, a healthy server must get no false alarm, and a fix latscope can apply must
be proven (or refuted) by an A/B with an interval."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

from latscope.campaign.diagnose import DiagnoseOptions, diagnose

pytestmark = [pytest.mark.integration, pytest.mark.slow]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _acting(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] in ("critical", "warning")]


def _top_cause(report: dict) -> dict:
    """The first cause of the server's own: a host busy with other work is named before any
    cause, by design, and a shared test box can be (local CI runs beside other work named
    host.cpu_contention first, then the planted kv and round-trip faults)."""
    return next(f for f in _acting(report) if f.get("role", "cause") == "cause"
                and f["layer"] != "client" and f["id"] != "host.cpu_contention")


def _check_run_dir(report: dict) -> None:
    run = Path(report["run_dir"])
    for name in ("manifest.json", "findings.json", "report.json", "report.html", "report.md",
                 "doctor.json", "net.json", "sweep.json", "stages.json"):
        assert (run / name).is_file(), name
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["kind"] == "diagnose" and manifest["schema_version"] == 2
    assert manifest["status"] == "ok"
    for f in report["findings"]:  # impossible shares are refused, never written
        share = (f.get("impact") or {}).get("share")
        assert share is None or 0.0 <= share <= 1.0


def test_max_num_seqs_queueing_is_named_first_and_the_fix_is_proven(tmp_path):
    # 3 pairs: the fewest whose t interval (4.3 x sd / sqrt(3)) can lie below zero on this
    # box's scatter (2 pairs: t = 12.7); the default 4 only made the test longer (#22)
    # CUDA_LAUNCH_BLOCKING=1 rides along (diagnose's serve_env reaching the server it starts,
    # read back from its /proc): it costs nothing on the CPU build. Loads up to 8: two slots
    # leave 6 of 8 waiting there (c=16 took 15 s of the sweep and was never the A/B's load)
    report = diagnose(DiagnoseOptions(serve_args=("--max-num-seqs", "2"), budget_s=240,
                                      serve_env={"CUDA_LAUNCH_BLOCKING": "1"},
                                      loads=(1, 4, 8), output_dir=str(tmp_path / "run"),
                                      max_proofs=1, pairs=3))
    _check_run_dir(report)
    blocking = {f["id"]: f for f in report["findings"]}["gpu.launch_blocking"]
    assert any(e["name"] == "CUDA_LAUNCH_BLOCKING" and "/proc/" in e["source"]
               for e in blocking["evidence"])
    # nothing to measure it by on the CPU build: information here, and it says so
    assert blocking["severity"] == "info" and "could not be measured here" in blocking["why"]
    top = _top_cause(report)
    assert top["id"] == "server.queue_max_num_seqs", [f["id"] for f in _acting(report)]
    # vLLM's counters (Running 2 = max_num_seqs 2 with a queue) guarantee the finding and its
    # rank; its share of TTFT moves with the machine's speed ratios (#22): warning or critical
    assert top["severity"] in ("warning", "critical") and top["impact"]["target"] == "ttft_mean"
    assert top["impact"]["share"] >= 0.5
    assert report["verdict"]["finding_id"] == top["id"] and not report["verdict"]["healthy"]
    assert "queueing" in report["verdict"]["text"] and "max_num_seqs" in report["verdict"]["text"]
    [exp] = [e for e in report["experiments"] if e["finding_id"] == top["id"]]
    assert exp["change"].startswith("--max-num-seqs") and exp["arms"][:4] == ["A", "B", "A", "B"]
    # the lowest load where queueing is half of TTFT: c=4 on most boxes; on a fast one the
    # spread sizes and staggered starts left c=4's queue below half, and the next was chosen
    assert exp["load"] in (4, 8)
    assert all(r is None or r < 0.5 for r in exp["prefix_cache_hit_rate"]["B"])
    # the fix's gain is asserted where latscope's client could time the runs: on a 2-core box
    # at load average ~10 (two CPU vLLMs side by side), 6 of 8 runs had event-loop lag p99 up
    # to 1 s and B's TTFT read 278/28/16/417 ms -- the box, not the server (#22)
    unreliable = exp["client_unreliable_runs"]  # the A/B names them itself (observe's rule)
    # ... at least those the summary alone shows (the split can add a reason, never remove one)
    assert {Path(d).name for d in exp["run_dirs"] if not _client_reliable(d)} <= set(unreliable)
    if len(unreliable) <= len(exp["run_dirs"]) // 4:
        assert exp["helped"] is True and exp["ci95_pct"][1] < 0, exp  # an interval below zero
    else:
        assert exp["b_mean"] < exp["a_mean"], exp  # the direction holds even then
        assert f"unreliable in {len(unreliable)} of {len(exp['arms'])} runs" in exp["note"]


def _client_reliable(run_dir: str) -> bool:
    from latscope.campaign.observe import client_reliability
    from latscope.rundir import read_json
    from latscope.runfiles import summary_of

    summary = summary_of(read_json(Path(run_dir) / "summary.json"))
    return client_reliability(summary, None).reliable


def test_queueing_under_a_spread_mix_gets_priority_and_the_gateway_proven_by_ab(tmp_path):
    # 90% short (16 in, 4 out), 10% long (192 in, 96 out): size CV ~1.7, past the 1 the
    # gateway asks for; two sequences at a time make a queue at c=16. The flag fix is only
    # proposed here (max_proofs=0), so the prove time goes to the two short-first fixes, each
    # its own A/B: vLLM's priority policy with the gateway's cost tags (first: in-engine, the
    # likelier one), then the gateway's queue, with what the budget has left. Each run is sized
    # to five aging horizons of the long requests after one of warm-up (~100 requests), so the
    # long class sets the test's time: at 512/256 (CV 1.9) it took 218 s with one core busy
    # (#22), at 256/128 352 s in a whole serial run (#52: hence 192/96). Two pairs each, what the checks of structure need (the gains are not asserted:
    # this box's figures are in docs/gateway.md).
    report = diagnose(DiagnoseOptions(serve_args=("--max-num-seqs", "2"), budget_s=720,
                                      loads=(1, 16), mix="short:0.9:16:4,long:0.1:192:96",
                                      output_dir=str(tmp_path / "run"), max_proofs=0, pairs=2))
    _check_run_dir(report)
    _check_priority_ab(report)
    _check_gateway_ab(report)


def _check_priority_ab(report: dict) -> None:
    """A is the server as diagnose started it (fcfs), B the server restarted with
    --scheduling-policy priority behind a tagging gateway, and B's own log shows the policy."""
    from latscope.gateway.tags import policy_from_log

    exps = [e for e in report["experiments"] if "--scheduling-policy priority" in e["change"]]
    # not measured: what the stages said (the budget, the fit) and what was proposed instead
    assert len(exps) == 1, ([(s["name"], s["status"], s["note"]) for s in report["stages"]],
                            report["proposals"])
    [exp] = exps
    assert exp["change"] == "--scheduling-policy priority + latscope gateway --policy tag"
    assert exp["measured"] is True and exp["metric"] == "short_ttft_mean_ms"
    pairs = len(exp["arms"]) // 2
    assert pairs >= 2 and exp["arms"] == ["A", "B"] * pairs
    assert exp["ci95_pct"] is not None and exp["ci95_pct"][0] <= exp["ci95_pct"][1]
    guards = {g["metric"]: g for g in exp["guards"]}
    assert set(guards) == {"long_e2e_mean_ms", "steady_rps"}
    assert all(g["ci95_pct"] is not None for g in guards.values()), guards
    assert exp["outcome"].startswith(("helped", "did not measurably help", "made it worse"))
    assert exp["helped"] == (exp["ci95_pct"][1] < 0)
    assert ("proposal" in exp) == exp["outcome"].startswith("helped")
    assert exp["server_policy"] == {"A": "fcfs", "B": "priority"}
    b_logs = list((Path(report["run_dir"]) / "prove" / "priority" / "server-B").rglob("*.log"))
    assert b_logs and policy_from_log(b_logs[0]) == "priority"
    # the B runs went through the gateway, the A runs straight to the server
    configs = {d[-1]: json.loads((Path(d) / "manifest.json").read_text())["config"]
               for d in exp["run_dirs"]}
    assert configs["A"]["url"] != configs["B"]["url"]
    print("priority A/B:", exp["outcome"], exp["change_pct"], exp["ci95_pct"],
          {k: (g["change_pct"], g["ci95_pct"]) for k, g in guards.items()})


def _check_gateway_ab(report: dict) -> None:
    """The same server direct and behind the gateway's sjf queue, its limit from the batch."""
    gateway = next(s for s in report["stages"] if s["name"] == "gateway")
    assert gateway["status"] == "ok", gateway
    [exp] = [e for e in report["experiments"] if e["change"].startswith("latscope gateway")]
    # auto's limit starts at the server's batch size, read from its command line
    assert exp["change"] == ("latscope gateway --policy sjf --max-inflight auto "
                             "--initial-inflight 2")
    assert exp["metric"] == "short_ttft_mean_ms" and exp["load"] == 16
    # runs long enough for the requests sjf holds back to finish inside them: five aging
    # horizons after one of warm-up (gateway.fits.gateway_run_shape), never under the defaults
    # at c=16 (16 + 64). The horizon in requests comes from the sweep's measured mix (~14-21
    # here), so it is read from the note, not assumed past the minimum warm-up
    shape = re.match(r"runs of (\d+) warm-up \+ (\d+) requests: sjf may hold a long request "
                     r"back while ~(\d+) others", exp["note"])
    assert shape, exp["note"]
    warmup, requests, horizon = map(int, shape.groups())
    configs = [json.loads((Path(d) / "manifest.json").read_text())["config"]
               for d in exp["run_dirs"]]
    assert all(c["num_requests"] == requests and c["warmup"] == warmup for c in configs), configs
    assert requests >= max(64, math.ceil(5 * (horizon - 0.5)))
    assert warmup >= max(16, math.ceil(horizon - 0.5))
    assert "sjf may hold a long request back" in exp["note"]
    pairs = len(exp["arms"]) // 2
    assert pairs >= 2 and exp["arms"] == ["A", "B"] * pairs
    assert exp["ci95_pct"] is not None and exp["ci95_pct"][0] <= exp["ci95_pct"][1]
    assert exp["guard"]["metric"] == "long_e2e_mean_ms" and exp["guard"]["ci95_pct"]
    # the verdict on it is the interval's: helped only when the whole interval is below zero
    assert exp["helped"] == (exp["ci95_pct"][1] < 0)
    finding = next(f for f in report["findings"] if f["id"] == exp["finding_id"])
    assert any(e["name"].startswith("A/B: latscope gateway") for e in finding["evidence"])
    print("gateway A/B:", exp["change_pct"], exp["ci95_pct"], exp["guard"]["change_pct"],
          exp["guard"]["ci95_pct"])


def test_a_kv_cache_too_small_for_the_load_is_named_first(vllm_target_kv, tmp_path):
    # the session's server of 17 blocks of 128 tokens (conftest): 2-block requests (128 + 64
    # tokens) fit eight at a time, so 16 in flight are admitted on their first block and
    # preempted when they need the second. Its flag is read from /proc of the pid found from
    # its port: a server latscope did not start
    target = vllm_target_kv
    report = diagnose(DiagnoseOptions(url=target.url, log=str(target.log_path),
                                      loads=(1, 16), budget_s=150, prove=False,
                                      output_dir=str(tmp_path / "run")))
    _check_run_dir(report)
    top = _top_cause(report)
    assert top["id"] in ("server.preemptions", "server.kv_saturation"), \
        [f["id"] for f in _acting(report)]
    ids = {f["id"] for f in report["findings"]}
    assert "server.preemptions" in ids
    assert any("--num-gpu-blocks-override" in p["change"] for p in report["proposals"])


def test_debug_and_request_logging_of_a_server_latscope_did_not_start_are_named(
        vllm_target_constrained, tmp_path):
    # the session's constrained server logs at DEBUG and logs every request
    # (tests/integration/conftest.py), read from /proc of the pid found from its port; at
    # c <= 2 its max_num_seqs 2 makes no queue, so the logging is the server's cause to name
    target = vllm_target_constrained
    report = diagnose(DiagnoseOptions(url=target.url, log=str(target.log_path), budget_s=90,
                                      loads=(1, 2), output_dir=str(tmp_path / "run")))
    _check_run_dir(report)
    top = _top_cause(report)
    assert top["id"] in ("server.debug_logging", "server.request_logging"), \
        [f["id"] for f in _acting(report)]
    debug = {f["id"]: f for f in report["findings"]}["server.debug_logging"]
    assert any(e["name"] == "VLLM_LOGGING_LEVEL" and e["value"] == "DEBUG"
               and "/proc/" in e["source"] for e in debug["evidence"])


@pytest.fixture(scope="module")
def healthy_target(vllm_target):
    """The session's default-flag server: healthy, and one vLLM start (~40-60 s) fewer than a
    server of this module's own (what earlier tests sent it is over before diagnose starts)."""
    return vllm_target


def test_a_healthy_server_gets_no_false_alarm(healthy_target, tmp_path):
    report = diagnose(DiagnoseOptions(url=healthy_target.url, log=str(healthy_target.log_path),
                                      budget_s=90, max_load=8,
                                      output_dir=str(tmp_path / "run")))
    _check_run_dir(report)
    # on a box busy with other work (another test run, a CI neighbour) the right answer is that
    # the host is busy, named first; a fault of the server's is never the answer
    busy = report["verdict"].get("finding_id") == "host.cpu_contention"
    assert report["verdict"]["healthy"] is True or busy, report["verdict"]
    assert not [f for f in report["findings"] if f["severity"] == "critical"
                and f["id"] != "host.cpu_contention"]
    network = [f for f in _acting(report) if f["layer"] == "network"]
    assert network == [], network
    assert report["target"]["same_host"] is True
    assert report["proposals"] == [] and report["experiments"] == []


def test_a_20ms_round_trip_on_the_path_is_named_first(healthy_target, tmp_path):
    from delay_proxy import DelayProxy
    from urllib.parse import urlsplit

    parts = urlsplit(healthy_target.url)
    with DelayProxy((parts.hostname, parts.port), 10.0) as proxy:
        report = diagnose(DiagnoseOptions(url=proxy.url, budget_s=60, loads=(1, 2),
                                          output_dir=str(tmp_path / "run")))
    _check_run_dir(report)
    top = _top_cause(report)
    assert top["id"] == "latency.network", [f["id"] for f in _acting(report)]
    rtt = next(e["value"] for e in top["evidence"] if "round trip" in e["name"])
    assert 19.0 <= rtt <= 30.0
    assert "co-locate" not in top["fix"].lower() and "proxy" in top["fix"]
    assert "network" in report["verdict"]["text"]
