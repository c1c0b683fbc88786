"""A real fleet: three local vLLM CPU replicas (the session's default and constrained servers and
a second default one), Debian's Prometheus scraping them every second and Debian's nginx
balancing them round robin, both started here on 127.0.0.1 (tests/fleet_parts.py); traffic from
vLLM's own `vllm bench serve` through nginx (tests/independent_traffic.py), never from latscope.

- The planted slow replica (`--max-num-seqs 2`, DEBUG and request logging: the constrained
  session server) is named by `diagnose --prometheus` with its cause, and the replicas' own
  request counters rose by exactly the generator's requests (the passive run sent none).
- The two alike replicas of the same window get no imbalance finding.
- `diagnose --url NGINX --replica ...` measures the balancer's part beside the replicas' own.
- Prometheus behind a token (nginx in front) without the token, with a wrong one and with the
  right one from --prometheus-bearer-token-file: one line each, the token never written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from fleet_parts import NginxBalancer, PrometheusServer
from independent_traffic import BenchServeTraffic

pytestmark = pytest.mark.integration
TOKEN = "fleet-test-t0ken-4c1d"
ALIKE_IDS = {"fleet.ttft_imbalance", "fleet.itl_imbalance", "fleet.load_imbalance",
             "fleet.config_mismatch", "fleet.replica_preemptions", "fleet.replica_stall"}


def _instance(target) -> str:
    return target.url.removeprefix("http://")


def _latscope(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "latscope", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "80"})


def _requests_finished(target) -> float:
    import urllib.request

    from latscope.server.metrics import parse_metrics_text

    with urllib.request.urlopen(target.url + "/metrics", timeout=10) as resp:
        page = parse_metrics_text(resp.read().decode())
    return page.value("vllm:request_success_total") or 0.0


def _traffic(url: str, target, *, prompts: int, rate: float) -> dict:
    run = BenchServeTraffic(url, model=target.model_name, tokenizer=target.tokenizer_dir or "",
                            num_prompts=prompts, rate=rate)
    with run:
        return run.wait(timeout_s=300)


@pytest.fixture(scope="module")
def fleet(vllm_target, vllm_target_constrained, vllm_target_twin, traffic_generator):
    replicas = [vllm_target, vllm_target_twin, vllm_target_constrained]
    with PrometheusServer([_instance(t) for t in replicas], interval_s=1) as prom, \
            NginxBalancer([_instance(t) for t in replicas]) as lb:
        prom.scraped()
        yield replicas, prom, lb


@pytest.fixture(scope="module")
def window(fleet):
    """One window of independent traffic through nginx: 72 requests of `vllm bench serve` at
    6 req/s, 24 a replica; the replicas' request counters before it."""
    replicas, _, lb = fleet
    before = sum(_requests_finished(t) for t in replicas)
    start = time.time() - 1
    result = _traffic(lb.url, replicas[0], prompts=72, rate=6)
    time.sleep(5)  # the last counters scraped (every 1 s) and inside the last 2 s step
    return {"start": f"{start:.0f}", "end": f"{time.time():.0f}", "before": before,
            "completed": result["completed"]}


def test_the_planted_slow_replica_is_named_with_its_cause(fleet, window, tmp_path):
    replicas, prom, _ = fleet
    slow = _instance(replicas[2])
    done = _latscope("diagnose", "--prometheus", prom.url, "--start", window["start"],
                     "--end", window["end"], "--selector", '{job="vllm"}', "--json",
                     "-o", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    verdict = report["verdict"]
    assert verdict["finding_id"] == "fleet.ttft_imbalance", verdict["text"]
    assert f"replica {slow} has" in verdict["text"]
    # the cause its own gauges guarantee: no more than its 2 slots ran while requests waited
    cap = re.search(r"queueing \(the others' \d+%\), behind its batch cap \(max_num_seqs\): "
                    r"Running never above (\d+) while up to (\d+) waited", verdict["text"])
    assert cap and 1 <= int(cap.group(1)) <= 2 and int(cap.group(2)) > 0, verdict["text"]
    rows = {r["name"]: r for r in report["replicas"]}
    assert set(rows) == {_instance(t) for t in replicas}
    assert rows[slow]["waiting_peak"] > 0 and rows[slow]["running_peak"] <= 2
    # passive: the replicas finished exactly the generator's requests, latscope sent none
    after = sum(_requests_finished(t) for t in replicas)
    assert after - window["before"] == window["completed"] == 72
    assert sum(r["requests"] for r in rows.values()) == 72
    # Prometheus' own arithmetic agrees with latscope's on the same data
    judged = [c for c in report["promql"] if c["agree"] is not None]
    assert judged and all(c["agree"] for c in judged if c["what"] in ("mean", "p50")), \
        [c for c in judged if not c["agree"]]
    text = (tmp_path / "run" / "report.md").read_text()
    assert f"| {slow} |" in text and (tmp_path / "run" / "report.html").stat().st_size > 10_000


def test_alike_replicas_get_no_imbalance_finding(fleet, window, tmp_path):
    # the two default replicas of the same window: alike, under the same round robin
    replicas, prom, _ = fleet
    pair = "|".join(_instance(t) for t in replicas[:2])
    done = _latscope("diagnose", "--prometheus", prom.url, "--start", window["start"],
                     "--end", window["end"], "--selector", f'{{job="vllm", instance=~"{pair}"}}',
                     "--json", "-o", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    found = {f["id"] for f in report["findings"]}
    assert not found & ALIKE_IDS, [f["title"] for f in report["findings"]]
    assert report["verdict"]["finding_id"] not in ALIKE_IDS
    assert [r["requests"] for r in report["replicas"]] == [24, 24]  # round robin


def test_the_balancers_part_is_measured_beside_the_replicas_own(fleet, tmp_path):
    replicas, _, lb = fleet
    done = _latscope("diagnose", "--url", lb.url, *sum((["--replica", t.url]
                                                        for t in replicas), []),
                     "--budget", "12s", "-c", "4", "--input-len", "64", "--output-len", "16",
                     "--json", "-o", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    router = report["router"]
    # every request whose first token the client got through nginx between the scrapes was
    # counted by one replica, no other: exactly, but for one whose first token came within the
    # few ms between the replica's count and the client's read of it, as a scrape was taken
    assert router["front_count"] > 0
    assert abs(router["replica_count"] - router["front_count"]) <= 1, router
    # the front's TTFT holds the replicas' own: what is left is the balancer's and the path's
    assert router["front_ttft_ms"] > router["replica_ttft_ms"] > 0
    assert router["router_ms"] == pytest.approx(
        router["front_ttft_ms"] - router["send_lag_ms"] - router["replica_ttft_ms"], abs=0.01)
    # the balancer's own hop, probed: GET /health through nginx and straight to the replicas
    assert router["front_rtt_ms"] > 0 and router["direct_rtt_ms"] > 0
    assert router["hop_ms"] == pytest.approx(
        max(0.0, router["front_rtt_ms"] - router["direct_rtt_ms"]), abs=0.01)
    share = next(f for f in report["findings"] if f["id"] == "fleet.router_share")
    assert share["title"].startswith("The balancer's hop: ")
    assert {r["name"] for r in report["replicas"]} == {_instance(t) for t in replicas}
    assert (tmp_path / "run" / "load" / "requests.jsonl").is_file()
    # bench through the balancer, each replica scraped: the same table after one run
    bench = _latscope("bench", "--url", lb.url, *sum((["--replica", t.url] for t in replicas),
                                                     []), "-n", "12", "-c", "3",
                      "--input-len", "64", "--output-len", "16", "--no-progress",
                      "--output-dir", str(tmp_path / "bench"))
    assert bench.returncode == 0, bench.stderr[-2000:]
    # the 12 measured requests, and those of the closed loop's ramp (at most c - 1 = 2, warm-up
    # sent before the first scrape) whose first token came after it: the replicas counted them
    counted = re.search(r"Router: mean TTFT.*?\((\d+) requests", bench.stdout, re.S)
    assert counted and 12 <= int(counted.group(1)) <= 14, bench.stdout
    assert all(_instance(t) in bench.stdout for t in replicas)


def test_a_prometheus_behind_a_token(fleet, tmp_path):
    _, prom, _ = fleet
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with NginxBalancer(["127.0.0.1:9"], auth_front=(prom.url, TOKEN)) as front:
        args = ["diagnose", "--prometheus", front.auth_url or "", "--since", "60s"]
        refused = _latscope(*args, "-o", str(tmp_path / "refused"))
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines()[-1] == (
            f"error: Prometheus at {front.auth_url} answered HTTP 401 to /api/v1/series: it "
            "needs credentials: --prometheus-bearer-token-file FILE")
        wrong = tmp_path / "wrong"
        wrong.write_text("nope\n")
        bad = _latscope(*args, "--prometheus-bearer-token-file", str(wrong))
        assert "the bearer token was refused" in bad.stderr and bad.returncode == 1
        ok = _latscope(*args, "--prometheus-bearer-token-file", str(token_file),
                       "-o", str(tmp_path / "ok"))
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "replicas by instance" in ok.stdout
    for run in ("refused", "ok"):
        for path in (tmp_path / run).rglob("*"):
            if path.is_file():
                assert TOKEN not in path.read_text(errors="replace"), path
    assert json.loads((tmp_path / "ok" / "manifest.json").read_text())["status"] == "ok"
    status = json.loads((tmp_path / "refused" / "manifest.json").read_text())["status"]
    assert status.startswith("failed: Prometheus at ") and "HTTP 401" in status
    assert TOKEN not in ok.stdout + ok.stderr + refused.stderr
    unreachable = _latscope("diagnose", "--prometheus", "http://127.0.0.1:9", "--since", "60s",
                            "-o", str(tmp_path / "gone"))
    assert unreachable.returncode == 1
    assert unreachable.stderr.strip().splitlines()[-1].startswith(
        "error: Prometheus at http://127.0.0.1:9 is unreachable: ")

