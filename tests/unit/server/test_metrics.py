"""/metrics parsing, renames, counter/histogram deltas and bucket quantiles, on the real fixtures.

Expected values are read from the fixture text with plain regexes here (an independent reading),
or follow from the definition of Prometheus' linear bucket interpolation.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from latscope.errors import ScrapeError
from latscope.model import MetricSnapshot
from latscope.server.metrics import (bucket_quantile, counter_delta, gauge_series,
                                     histogram_delta, parse_metrics_text)


def _text(fixtures_dir, rel):
    return (fixtures_dir / "vllm" / rel).read_text()


def _grep_value(text: str, sample: str) -> float:
    """The value of the one line starting with ``sample{`` (single engine fixtures)."""
    m = re.search(r"^" + re.escape(sample) + r"\{[^}]*\} (\S+)$", text, re.M)
    assert m, sample
    return float(m.group(1))


def _snap(text: str, t_s: float) -> MetricSnapshot:
    return MetricSnapshot(t_ns=int(t_s * 1e9), wall_time=t_s, samples=parse_metrics_text(text).samples)


@pytest.mark.parametrize("rel", ["cpu-vllm0.32/metrics.txt", "h200-vllm0.26/metrics_after_c512.txt",
                                 "cpu-vllm0.32/metrics_custom_buckets.txt"])
def test_vllm_pages_parse_with_histograms_consistent(fixtures_dir, rel):
    text = _text(fixtures_dir, rel)
    page = parse_metrics_text(text)
    assert page.has_vllm
    assert page.families["vllm:request_queue_time_seconds"].type == "histogram"
    assert page.families["vllm:num_preemptions"].type == "counter"  # parser strips _total
    count = page.value("vllm:request_queue_time_seconds_count")
    assert count == _grep_value(text, "vllm:request_queue_time_seconds_count")
    assert page.value("vllm:request_queue_time_seconds_bucket", le="+Inf") == count
    assert not any(s.name.endswith("_created") for s in page.samples)


def test_disabled_stats_page_has_no_vllm_series(fixtures_dir):
    page = parse_metrics_text(_text(fixtures_dir, "cpu-vllm0.32/metrics_disable_log_stats.txt"))
    assert not page.has_vllm
    assert page.value("process_resident_memory_bytes") is not None  # still a valid page


def test_garbage_is_a_scrape_error():
    with pytest.raises(ScrapeError):
        parse_metrics_text("<html><body>Not Found</body></html>\n")


OLD_PAGE = """# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 100.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 1.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 3.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.2
vllm:time_per_output_token_seconds_count{model_name="m"} 3.0
"""


def test_old_names_map_to_current_ones():
    page = parse_metrics_text(OLD_PAGE)
    assert page.value("vllm:kv_cache_usage_perc") == 0.5
    assert page.value("vllm:prefix_cache_queries_total") == 100.0
    assert page.value("vllm:inter_token_latency_seconds_count") == 3.0
    assert page.renamed["vllm:gpu_cache_usage_perc"] == "vllm:kv_cache_usage_perc"


def test_old_and_new_name_together_count_once():
    both = OLD_PAGE + ('# TYPE vllm:kv_cache_usage_perc gauge\n'
                       'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n')
    page = parse_metrics_text(both)
    assert page.value("vllm:kv_cache_usage_perc") == 0.25


def test_histogram_delta_between_two_real_scrapes(fixtures_dir):
    t128 = _text(fixtures_dir, "h200-vllm0.26/metrics_after_c128.txt")
    t512 = _text(fixtures_dir, "h200-vllm0.26/metrics_after_c512.txt")
    h = histogram_delta(_snap(t128, 100.0), _snap(t512, 160.0), "vllm:request_queue_time_seconds")
    name = "vllm:request_queue_time_seconds"
    d_count = _grep_value(t512, name + "_count") - _grep_value(t128, name + "_count")
    d_sum = _grep_value(t512, name + "_sum") - _grep_value(t128, name + "_sum")
    assert h is not None and h.count == d_count and h.sum == pytest.approx(d_sum)
    assert h.mean == pytest.approx(d_sum / d_count)
    assert h.dt_s == pytest.approx(60.0)
    p50 = h.quantile(0.5)
    assert p50.lower <= p50.value <= p50.upper and p50.error_bound == p50.upper - p50.lower
    edges = {float(x) for x in re.findall(name + r'_bucket\{[^}]*le="([^"+]+)"', t512)}
    assert p50.upper in edges and (p50.lower in edges or p50.lower == 0.0)


def test_quantile_uses_the_pages_own_bucket_edges(fixtures_dir):
    text = _text(fixtures_dir, "cpu-vllm0.32/metrics_custom_buckets.txt")
    h = histogram_delta(None, _snap(text, 1.0), "vllm:time_to_first_token_seconds")
    les = [float(x) for x in re.findall(
        r'vllm:time_to_first_token_seconds_bucket\{[^}]*le="([^"]+)"', text)]
    assert [le for le, _ in h.buckets] == sorted(les)
    assert h.since_start
    est = h.quantile(0.5)
    assert est.upper in les and (est.lower in les or est.lower == 0.0)


def test_interpolation_follows_prometheus_definition():
    buckets = [(1.0, 10.0), (2.0, 30.0), (4.0, 40.0), (math.inf, 40.0)]
    est = bucket_quantile(buckets, 0.5)  # rank 20: halfway through (1, 2]
    assert (est.value, est.lower, est.upper, est.error_bound) == (1.5, 1.0, 2.0, 1.0)
    first = bucket_quantile(buckets, 0.1)  # rank 4 in the first bucket, lower edge 0
    assert first.value == pytest.approx(0.4) and first.lower == 0.0
    top = bucket_quantile([(1.0, 1.0), (math.inf, 10.0)], 0.99)
    assert top.above_top_bucket and top.value == 1.0
    assert bucket_quantile([(1.0, 0.0), (math.inf, 0.0)], 0.5) is None


def test_true_quantile_lies_inside_the_reported_bucket():
    rng = np.random.default_rng(7)
    samples = rng.lognormal(mean=-1.0, sigma=1.0, size=5000)
    edges = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, math.inf]
    buckets = [(e, float(np.sum(samples <= e))) for e in edges]
    for q in (0.1, 0.5, 0.9, 0.99):
        est = bucket_quantile(buckets, q)
        true = float(np.quantile(samples, q))
        assert est.lower <= true <= est.upper, (q, true, est)


def test_counter_rate_and_reset():
    a = _snap('# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine="0"} 100\n'
              'vllm:prompt_tokens_total{engine="1"} 50\n', 10.0)
    b = _snap('# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine="0"} 300\n'
              'vllm:prompt_tokens_total{engine="1"} 150\n', 12.0)
    d = counter_delta(a, b, "vllm:prompt_tokens_total")
    assert (d.delta, d.rate_per_s, d.reset) == (300.0, 150.0, False)
    assert counter_delta(a, b, "vllm:prompt_tokens_total", {"engine": "1"}).delta == 100.0
    restarted = counter_delta(b, a, "vllm:prompt_tokens_total")
    assert restarted.reset and restarted.delta == 150.0
    assert counter_delta(a, b, "vllm:no_such_total") is None


def test_gauge_series_aligned_to_origin(fixtures_dir):
    text = _text(fixtures_dir, "h200-vllm0.26/metrics_after_c512.txt")
    series = gauge_series([_snap(text, 5.0), _snap(text, 7.0)], "vllm:num_requests_waiting",
                          origin_ns=int(4e9))
    assert [t for t, _ in series] == [1.0, 3.0]
    assert series[0][1] == _grep_value(text, "vllm:num_requests_waiting")
