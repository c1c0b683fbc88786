"""Findings from /metrics snapshots and from a decomposition."""

from __future__ import annotations

from latscope.analysis.decompose import Component, Decomposition
from latscope.findings.latency import Context, findings_from_decomposition
from latscope.findings.server import findings_from_metrics
from latscope.model import MetricSnapshot, Severity
from latscope.server.metrics import parse_metrics_text


def _snap(t_s: float, preempt: float, kv: float, deferred: float = 0.0) -> MetricSnapshot:
    text = ("# TYPE vllm:num_preemptions counter\n"
            f'vllm:num_preemptions_total{{engine="0"}} {preempt}\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0"}} {kv}\n'
            "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
            f'vllm:num_requests_waiting_by_reason{{engine="0",reason="capacity"}} 1\n'
            f'vllm:num_requests_waiting_by_reason{{engine="0",reason="deferred"}} {deferred}\n')
    return MetricSnapshot(int(t_s * 1e9), t_s, parse_metrics_text(text).samples)


def test_preemptions_and_kv_saturation_from_scrapes():
    snaps = [_snap(0, 10, 0.5), _snap(2, 10, 0.93), _snap(4, 16, 0.97, deferred=3)]
    found = {f.id: f for f in findings_from_metrics(snaps)}
    pre = found["server.preemptions"]
    assert pre.evidence[0].value == 6.0  # 16 - 10 during the run, not the 16 since start
    assert pre.evidence[1].value == 1.5  # per second over the 4 s window
    kv = found["server.kv_saturation"]
    assert kv.severity == Severity.WARNING and kv.evidence[0].value == 0.97
    assert found["server.waiting_deferred"].evidence[0].value == 3.0


def test_quiet_run_and_disabled_stats(fixtures_dir):
    assert findings_from_metrics([_snap(0, 5, 0.1), _snap(2, 5, 0.2)]) == []
    text = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics_disable_log_stats.txt").read_text()
    snap = MetricSnapshot(0, 0.0, parse_metrics_text(text).samples)
    assert [f.id for f in findings_from_metrics([snap])] == ["server.stats_disabled"]
    assert findings_from_metrics([])[0].severity == Severity.SKIPPED


def _decomp(queue: float, net: float, client: float = 1.0) -> Decomposition:
    total = 100.0
    rows = [Component("ttft", "TTFT (client)", None, "client", total),
            Component("ttft.client", "latscope client", "ttft", "records", client),
            Component("ttft.network", "network round trip", "ttft", "net probe", net),
            Component("ttft.server.queue", "queue", "ttft.server", "hist", queue)]
    dominant = "ttft.server.queue" if queue >= net else "ttft.network"
    return Decomposition(rows, dominant, None, 10.0, "histograms", 10, 10.0)


def test_decomposition_names_the_dominant_share():
    ctx = Context(measured_at="c=16")
    found = {f.id: f for f in findings_from_decomposition(_decomp(queue=70.0, net=25.0), ctx)}
    assert found["latency.queue"].severity == Severity.WARNING  # a symptom: its cause is elsewhere
    assert found["latency.queue"].role == "symptom"
    assert found["latency.queue"].impact == {"target": "ttft_mean", "share": 0.7,
                                             "value_ms": 70.0, "measured_at": "c=16"}
    assert found["latency.network"].severity == Severity.WARNING
    # small shares name nothing, but the queue's is kept as information: a limit found on the
    # server's own counters takes it (diagnose), whatever the other shares on a slow machine
    [queue] = findings_from_decomposition(_decomp(queue=10.0, net=5.0))
    assert queue.id == "latency.queue" and queue.severity == Severity.INFO
    assert findings_from_decomposition(_decomp(queue=0.0, net=5.0)) == []


def test_network_is_not_blamed_when_the_client_is_unreliable_or_shares_the_host():
    starved = Context(client_reliable=False, client_why="event-loop lag p99 182 ms")
    net = {f.id: f for f in findings_from_decomposition(_decomp(10.0, 60.0), starved)}
    assert net["latency.network"].severity == Severity.INFO
    assert "unreliable" in net["latency.network"].why
    same = {f.id: f for f in findings_from_decomposition(_decomp(10.0, 60.0),
                                                         Context(same_host=True))}
    assert net["latency.network"].severity == Severity.INFO
    assert same["latency.network"].severity == Severity.CRITICAL
    assert "co-locate" not in same["latency.network"].fix.lower()
    assert "proxy" in same["latency.network"].fix


def test_a_client_that_lost_much_of_ttft_is_named():
    found = {f.id: f for f in findings_from_decomposition(_decomp(10.0, 1.0, client=40.0))}
    assert found["latency.client"].severity == Severity.WARNING
    assert found["latency.client"].layer == "client"


def _gauges(t_s: float, running: float, waiting: float, kv: float = 0.1,
            preempted: float = 0.0) -> MetricSnapshot:
    text = (f'vllm:num_preemptions_total{{engine="0"}} {preempted}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0"}} {running}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{engine="0"}} {waiting}\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0"}} {kv}\n')
    return MetricSnapshot(int(t_s * 1e9), t_s, parse_metrics_text(text).samples)


def test_a_full_batch_and_a_token_budget_queue_are_told_apart_in_scrapes():
    full = [_gauges(t, 2, 14) for t in range(5)]
    by_id = {f.id: f for f in findings_from_metrics(full, max_num_seqs=2)}
    assert "server.queue_max_num_seqs" in by_id and "server.queue_token_budget" not in by_id
    budget = [_gauges(t, 39, 115) for t in range(5)]
    by_id = {f.id: f for f in findings_from_metrics(budget, max_num_seqs=1024,
                                                    max_num_batched_tokens=8192)}
    assert by_id["server.queue_token_budget"].severity == Severity.WARNING
    assert "server.queue_max_num_seqs" not in by_id


def test_the_ramp_of_a_first_wave_is_not_a_token_budget_queue():
    # one scrape with a queue while the batch fills, then a full batch of 512 that never waits
    ramp = [_gauges(0, 39, 473), *(_gauges(t, 512, 0) for t in range(1, 8))]
    ids = {f.id for f in findings_from_metrics(ramp, max_num_seqs=1024,
                                               max_num_batched_tokens=8192)}
    assert "server.queue_token_budget" not in ids


def test_a_long_round_trip_on_one_host_is_named_whatever_its_share():
    slow_path = _decomp(queue=10.0, net=8.0)
    slow_path.components[0].mean_ms = 400.0  # 8 ms of 400 ms: 2%
    found = {f.id: f for f in findings_from_decomposition(slow_path, Context(same_host=True))}
    assert found["latency.network"].severity == Severity.WARNING
    assert "far above a loopback" in found["latency.network"].why
    # 10 ms of queue in 400 ms (2.5%) is below what the queue's share is kept from
    assert findings_from_decomposition(slow_path, Context(same_host=False)) == []


def test_a_full_batch_seen_apart_from_the_queue_in_a_short_step_is_still_the_cap():
    # the CPU target with 2 slots, a step of three scrapes: the cap reached, then the queue
    short = [_gauges(0, 1, 1), _gauges(0.5, 2, 0), _gauges(1.0, 1, 14), _gauges(1.5, 0, 0)]
    by_id = {f.id: f for f in findings_from_metrics(short, max_num_seqs=2)}
    assert by_id["server.queue_max_num_seqs"].severity == Severity.WARNING
    assert "server.queue_token_budget" not in by_id
    # neither the budget nor vLLM's tokens per step known: a queue below the cap blames nothing
    unknown = [_gauges(t, 1, 14) for t in range(4)]
    by_id = {f.id: f for f in findings_from_metrics(unknown, max_num_seqs=2)}
    assert by_id["server.queue_token_budget"].severity == Severity.INFO


def test_a_plateau_of_an_unknown_cap_is_not_blamed_on_max_num_seqs_when_requests_were_preempted():
    # the CPU target with 17 KV blocks: 8 running, 8 waiting, the KV gauge at 47-70% in every
    # scrape, yet 9 preemptions: the cache filled between scrapes, so the plateau is the KV cache's
    plateau = [_gauges(t, 8, 8, kv=0.47 + 0.05 * t) for t in range(5)]
    assert "server.queue_max_num_seqs" in {f.id for f in findings_from_metrics(plateau)}
    preempted = [_gauges(t, 8, 8, kv=0.47 + 0.05 * t, preempted=2 * t + 1) for t in range(5)]
    ids = {f.id for f in findings_from_metrics(preempted)}
    assert "server.preemptions" in ids and "server.queue_max_num_seqs" not in ids


def test_one_scrape_of_a_known_cap_binding_with_a_queue_is_a_warning_whatever_else_was_seen():
    # vLLM's own gauges in one scrape: Running 2 = max_num_seqs 2 with 2 waiting, among eight
    # scrapes that caught the batch draining; the cap binds, and the rule says so (#20)
    scrapes = [_gauges(t, 1, 0) for t in range(8)]
    scrapes[3] = _gauges(3, 2, 2)
    [found] = [f for f in findings_from_metrics(scrapes, max_num_seqs=2)
               if f.id == "server.queue_max_num_seqs"]
    assert found.severity == Severity.WARNING
    assert "Running 2 = max_num_seqs 2, Waiting 2" in found.title
    # the cap and the queue only in different scrapes: an inference, sustained only if repeated
    apart = [_gauges(t, 1, 0) for t in range(8)]
    apart[2], apart[5] = _gauges(2, 2, 0), _gauges(5, 1, 3)
    [inferred] = [f for f in findings_from_metrics(apart, max_num_seqs=2)
                  if f.id == "server.queue_max_num_seqs"]
    assert inferred.severity == Severity.INFO
