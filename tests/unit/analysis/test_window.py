"""The window of live traffic read from real /metrics pages: counter resets, bucket edges that
change, vLLM's renamed series (and both names at once), a stalled engine, a window without
traffic, a server without vllm:* series. The pages are vLLM 0.32's own (the CPU build's
fixtures); where a fault needs a second page, it is the same page as the server would have
written it (a counter further on, a renamed series, frozen counters), said in each test."""

from __future__ import annotations

import re

import pytest

from latscope.analysis.traffic import STALL_MIN_S, window_facts
from latscope.analysis.window import build_window
from latscope.campaign.passive import conclude_window
from latscope.model import MetricSnapshot
from latscope.server.metrics import parse_metrics_text


def snap(text: str, t_s: float) -> MetricSnapshot:
    return MetricSnapshot(t_ns=int(t_s * 1e9), wall_time=1.7e9 + t_s,
                          samples=parse_metrics_text(text).samples)


def scaled(text: str, factor: float) -> str:
    """The page with every vllm counter, histogram count, sum and bucket multiplied: the same
    server later, having served ``factor`` times the requests (gauges kept)."""
    def one(m: re.Match[str]) -> str:
        return f"{m.group(1)} {float(m.group(2)) * factor!r}"

    return re.sub(r"^(vllm:\S*(?:_total|_bucket|_sum|_count)(?:\{[^}]*\})?) (\S+)$", one, text,
                  flags=re.M)


def gauges(text: str, running: float, waiting: float) -> str:
    text = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", rf"\g<1> {running}", text,
                  flags=re.M)
    return re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", rf"\g<1> {waiting}", text,
                  flags=re.M)


@pytest.fixture(scope="module")
def page(fixtures_dir) -> str:
    return (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics.txt").read_text()


def test_a_counter_reset_inside_the_window_counts_that_interval_from_zero(page):
    # 264 requests, then 528 (264 more), then a restart: 264 since it, then 528
    snaps = [snap(page, 0), snap(scaled(page, 2), 2), snap(page, 4), snap(scaled(page, 2), 6)]
    w = build_window(snaps)
    assert [i.reset for i in w.intervals] == [False, True, False]
    assert w.resets == (4.0,)
    # as Prometheus' increase: 264 + 264 (the restarted server's own) + 264
    assert w.counters["finished"] == pytest.approx(3 * 264)
    assert w.hists["ttft"].count == pytest.approx(3 * 264)
    facts = window_facts(snaps)
    assert any("restarted" in n for n in facts.notes)


def test_bucket_edges_that_change_are_merged_on_the_edges_both_pages_have(fixtures_dir, page):
    custom = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics_custom_buckets.txt").read_text()
    # the default-bucket server, then a restart with --custom-histogram-buckets
    snaps = [snap(page, 0), snap(scaled(page, 2), 2), snap(custom, 4), snap(scaled(custom, 2), 6)]
    w = build_window(snaps)
    old = {le for le, _ in w.intervals[0].hists["queue"].buckets}
    new = {le for le, _ in w.intervals[2].hists["queue"].buckets}
    assert old != new  # the two servers' queue histograms have other edges
    assert ("vllm:request_queue_time_seconds", 4.0) in w.bucket_changes
    merged = {le for le, _ in w.hists["queue"].buckets}
    assert merged == old & new  # coarser, never invented
    total = w.hists["queue"]
    assert total.buckets[-1][1] == pytest.approx(total.count)  # +Inf holds every observation
    assert any("bucket edges changed" in n for n in window_facts(snaps).notes)


def test_renamed_series_of_an_older_vllm_read_as_todays(page):
    old = (page.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
           .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
           .replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_"))
    assert "vllm:kv_cache_usage_perc" not in old
    new_w = window_facts([snap(page, 0), snap(scaled(page, 2), 2)])
    old_w = window_facts([snap(old, 0), snap(scaled(old, 2), 2)])
    assert old_w.latency["itl"].count == new_w.latency["itl"].count > 0
    assert old_w.traffic.prefix_hit_rate == new_w.traffic.prefix_hit_rate
    assert old_w.traffic.kv_max == new_w.traffic.kv_max


def test_a_server_showing_hidden_old_names_beside_the_new_counts_each_once(page):
    # --show-hidden-metrics-for-version: the deprecated series exported beside the current one
    old_itl = "\n".join(line.replace("vllm:inter_token_latency_seconds",
                                     "vllm:time_per_output_token_seconds")
                        for line in page.splitlines()
                        if line.startswith("vllm:inter_token_latency_seconds"))
    both = page + old_itl + "\n"
    one = window_facts([snap(page, 0), snap(scaled(page, 2), 2)])
    two = window_facts([snap(both, 0), snap(scaled(both, 2), 2)])
    assert two.latency["itl"].count == one.latency["itl"].count


def test_intervals_without_traffic_are_idle_and_a_window_of_them_has_no_verdict(page):
    snaps = [snap(page, t) for t in range(0, 12, 2)]  # the same lifetime counters: nothing new
    facts = window_facts(snaps)
    assert all(i.idle for i in facts.window.intervals)
    assert not facts.has_traffic and facts.spikes == () and facts.split is None
    c = conclude_window(snaps)
    assert c.verdict.kind == "none" and c.verdict.text.startswith("No traffic")
    assert not c.verdict.healthy


def test_requests_in_the_server_and_no_token_computed_is_a_stall_that_explains_the_queue(page):
    moving = [snap(page, 0), snap(scaled(page, 1.5), 2)]  # traffic, then the engine freezes:
    frozen = [snap(gauges(scaled(page, 1.5), 2, 6), 2 + t) for t in range(2, 42, 2)]
    facts = window_facts(moving + frozen)
    assert len(facts.stalls) == 1 and facts.stalls[0].seconds >= STALL_MIN_S
    assert facts.stalls[0].seconds == pytest.approx(38.0)
    c = conclude_window(moving + frozen)
    stall = next(f for f in c.ranked if f.id == "server.stall")
    assert stall.severity.value == "critical"  # 38 s >= 30 s
    assert c.ranked[0].id == "server.stall"
    assert c.verdict.finding_id == "server.stall"


def test_a_server_with_stats_disabled_says_what_could_not_be_seen(fixtures_dir):
    text = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics_disable_log_stats.txt").read_text()
    snaps = [snap(text, t) for t in range(0, 10, 2)]
    c = conclude_window(snaps)
    assert [f.id for f in c.ranked] == ["server.stats_disabled"]
    assert c.verdict.kind == "none"
    assert "--disable-log-stats" in c.verdict.text
    assert "could not be seen" in c.verdict.text


def test_one_scrape_is_no_window(page):
    c = conclude_window([snap(page, 0)])
    assert c.verdict.kind == "none" and "needs two" in c.verdict.text
