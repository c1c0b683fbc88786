"""The fleet window read back from a real Prometheus (its recorded answers, replayed over HTTP):
three vLLM CPU replicas behind nginx, one of them `--max-num-seqs 1`, under `vllm bench serve`
traffic (90 requests at 6 req/s through nginx: 30 a replica); two alike replicas (40 requests at
4 req/s); and the faults a user meets: a token refused, a selector Prometheus rejects, one that
matches nothing, a replica label that does not identify replicas (tests/data/prometheus,
recorded by scripts/fleet_lab.py record)."""

from __future__ import annotations

import json

import pytest

from latscope.campaign.fleet import PrometheusOptions, diagnose_prometheus
from latscope.errors import ConfigError
from latscope.fleet.facts import replica_facts
from latscope.fleet.prometheus import PrometheusClient, PrometheusError
from latscope.fleet.window import read_window

SLOW = "127.0.0.1:37663"  # the --max-num-seqs 1 replica of the recording
FAST = ("127.0.0.1:40415", "127.0.0.1:59899")


def _diagnose(url, spec, tmp_path, token_file=None):
    opts = PrometheusOptions(url, spec.start, spec.end, spec.step, spec.selector,
                             spec.replica_labels, token_file, str(tmp_path / "run"),
                             ["diagnose", "--prometheus", url])
    return diagnose_prometheus(opts, lambda line: None)


def test_the_window_is_each_replicas_snapshots_of_every_vllm_series(recorded_prometheus):
    url, spec, replayer = recorded_prometheus("slow_replica")
    window = read_window(PrometheusClient(url), spec)
    assert replayer.misses == []
    assert [r.name for r in window.replicas] == sorted([SLOW, *FAST])
    assert window.step == 2.0 and window.scrape_interval_s == pytest.approx(1.1)
    for r in window.replicas:
        assert len(r.snapshots) == 30  # 59 s at a 2 s step
        names = {s.name for s in r.snapshots[-1].samples}
        assert {"vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket",
                "vllm:request_success_total", "vllm:cache_config_info"} <= names
        # each replica's snapshots hold its own series only, labelled as Prometheus has them
        assert {s.labels["instance"] for s in r.snapshots[-1].samples} == {r.name}
        assert all(v == 1.0 for _, v in r.up)


def test_the_replicas_counters_add_up_to_the_generators_requests(recorded_prometheus):
    url, spec, _ = recorded_prometheus("slow_replica")
    window = read_window(PrometheusClient(url), spec)
    facts = [replica_facts(r.name, r.labels, r.snapshots, up=r.up) for r in window.replicas]
    # vllm bench serve completed 90 requests through round-robin nginx
    assert [f.finished for f in facts] == [30.0, 30.0, 30.0]
    assert [f.latency["ttft"].count for f in facts] == [30.0, 30.0, 30.0]
    slow = next(f for f in facts if f.name == SLOW)
    # the cap its counters show: one request ran at a time while up to 21 waited
    assert slow.running_peak == 1 and slow.running_peak_queued == 1 and slow.waiting_peak == 21


@pytest.mark.slow  # renders report.html (vl-convert: 1-3 s)
def test_the_slow_replica_is_named_with_its_cause(recorded_prometheus, tmp_path):
    url, spec, _ = recorded_prometheus("slow_replica")
    report = _diagnose(url, spec, tmp_path)
    verdict = report["verdict"]
    assert verdict["finding_id"] == "fleet.ttft_imbalance" and not verdict["healthy"]
    # the others' upper median: the slower of the two fast replicas (785 ms)
    assert f"replica {SLOW} has 14.0x the others' median TTFT (10.96 s vs 785 ms): 97% of its " \
        "TTFT is queueing (the others' 0%), behind its batch cap (max_num_seqs): Running never " \
        "above 1 while up to 21 waited; the others ran up to 21 at once" in verdict["text"]
    assert report["findings"][0]["impact"]["target"] == "server_ttft_mean"
    rows = {r["name"]: r for r in report["replicas"]}
    assert rows[SLOW]["verdict_finding"] == "server.queue_max_num_seqs"
    assert all(rows[f]["verdict"].startswith("No configuration fault found") for f in FAST)
    # Prometheus' increase() and histogram_quantile() on the same window agree with latscope
    assert len(report["promql"]) == 36 and all(c["agree"] for c in report["promql"])
    run = tmp_path / "run"
    assert json.loads((run / "manifest.json").read_text())["status"] == "ok"
    assert {p.name for p in run.iterdir()} >= {"report.json", "report.md", "report.html",
                                                "findings.json", "window.json", "replicas"}
    lines = (run / "replicas" / "127.0.0.1_37663" / "metrics" / "snapshots.jsonl").read_text()
    assert len(lines.splitlines()) == 30


@pytest.mark.slow  # renders report.html (vl-convert: 1-3 s)
def test_alike_replicas_get_a_clean_bill(recorded_prometheus, tmp_path):
    url, spec, _ = recorded_prometheus("balanced_pair")
    report = _diagnose(url, spec, tmp_path)
    assert report["findings"] == []
    assert report["verdict"]["kind"] == "healthy"
    assert [r["requests"] for r in report["replicas"]] == [20.0, 20.0]


@pytest.mark.slow  # renders report.html (vl-convert: 1-3 s)
def test_the_token_is_sent_and_never_written(recorded_prometheus, tmp_path):
    url, spec, replayer = recorded_prometheus("auth_token")
    token = tmp_path / "token"
    token.write_text("fleet-lab-token\n")
    report = _diagnose(url, spec, tmp_path, token_file=str(token))
    assert report["verdict"]["finding_id"] == "fleet.ttft_imbalance"
    assert {h.get("Authorization") for h in replayer.seen_headers} == {"Bearer fleet-lab-token"}
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert "fleet-lab-token" not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("scenario, kind, line", [
    ("auth_refused", PrometheusError,
     "answered HTTP 401 to /api/v1/series: it needs credentials: "
     "--prometheus-bearer-token-file FILE"),
    ("bad_selector", PrometheusError,
     'Prometheus refused {__name__=~"vllm:.+", job=~"(}: bad_data: invalid parameter '
     '"match[]": 1:28: parse error: unterminated quoted string'),
    ("no_match", PrometheusError,
     'no vllm:* series {job="nope"} in the window (2026-12-07 01:21:22 to 2026-12-07 01:22:22 '
     "UTC); Prometheus has jobs: vllm: check --selector"),
    ("model_label", ConfigError,
     "--replica-label model_name does not identify replicas: 3 series of "
     "vllm:num_requests_running share model_name=tiny-llama and differ in instance: use "
     "--replica-label instance"),
])
def test_each_fault_is_one_line_and_the_run_directory_says_so(recorded_prometheus, tmp_path,
                                                               scenario, kind, line):
    url, spec, _ = recorded_prometheus(scenario)
    with pytest.raises(kind) as err:
        _diagnose(url, spec, tmp_path)
    assert line in str(err.value) and "\n" not in str(err.value)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == f"failed: {err.value}"
