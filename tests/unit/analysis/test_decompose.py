"""Latency decomposition on records and /metrics pages whose true components are known by
construction (and on the real fixture pages for the histogram side)."""

from __future__ import annotations

import json

import orjson
import pytest

from latscope.analysis.decompose import decompose, decompose_run, per_request_server_timings
from latscope.model import MetricSnapshot, RequestRecord
from latscope.server.metrics import parse_metrics_text

MS = 1_000_000


def _hist(name: str, total_s: float, count: int, edges=(0.01, 0.1, 1.0)) -> str:
    """A histogram where every observation equals total_s / count (so buckets are exact)."""
    each = total_s / count if count else 0.0
    lines = [f"# TYPE {name} histogram"]
    for le in edges:
        lines.append(f'{name}_bucket{{le="{le}",model_name="m"}} {count if each <= le else 0}')
    lines.append(f'{name}_bucket{{le="+Inf",model_name="m"}} {count}')
    lines.append(f'{name}_sum{{model_name="m"}} {total_s}')
    lines.append(f'{name}_count{{model_name="m"}} {count}')
    return "\n".join(lines) + "\n"


def _page(n: int, ttft: float, queue: float, prefill: float, decode: float, e2e: float) -> str:
    """Cumulative page after n requests, each with the given interval (seconds)."""
    return "".join([
        _hist("vllm:time_to_first_token_seconds", ttft * n, n),
        _hist("vllm:request_queue_time_seconds", queue * n, n),
        _hist("vllm:request_prefill_time_seconds", prefill * n, n),
        _hist("vllm:request_decode_time_seconds", decode * n, n),
        _hist("vllm:e2e_request_latency_seconds", e2e * n, n),
    ])


def _snap(text: str, t_s: float) -> MetricSnapshot:
    return MetricSnapshot(int(t_s * 1e9), t_s, parse_metrics_text(text).samples)


def _records(n: int, ttft_ms: float, lag_ms: float, decode_ms: float, t0_ms: float = 1000.0,
             server: dict | None = None, open_loop: bool = True) -> list[RequestRecord]:
    """Records timed from their schedule (open loop) unless told: ``ttft_ms`` is then TTFT."""
    out = []
    for i in range(n):
        sched = int((t0_ms + i) * MS)
        first = sched + int(ttft_ms * MS)
        out.append(RequestRecord(index=i, request_id=f"r{i}", scheduled_ns=sched,
                                 sent_ns=sched + int(lag_ms * MS), first_token_ns=first,
                                 end_ns=first + int(decode_ms * MS), status=200,
                                 server=dict(server or {}), open_loop=open_loop))
    return out


def test_components_add_up_to_client_ttft():
    # 10 earlier requests, then 20 in the run: each 80 ms server TTFT = 50 queue + 20 prefill + 10
    before = _page(10, 0.5, 0.3, 0.1, 0.2, 0.8)
    after = "".join([
        _hist("vllm:time_to_first_token_seconds", 0.5 * 10 + 0.080 * 20, 30),
        _hist("vllm:request_queue_time_seconds", 0.3 * 10 + 0.050 * 20, 30),
        _hist("vllm:request_prefill_time_seconds", 0.1 * 10 + 0.020 * 20, 30),
        _hist("vllm:request_decode_time_seconds", 0.2 * 10 + 0.150 * 20, 30),
        _hist("vllm:e2e_request_latency_seconds", 0.8 * 10 + 0.230 * 20, 30),
    ])
    result = decompose(_records(20, ttft_ms=100.0, lag_ms=1.0, decode_ms=160.0),
                       [_snap(before, 10.0), _snap(after, 14.0)])
    get = {c.key: c for c in result.components}
    assert get["ttft"].mean_ms == pytest.approx(100.0)
    assert get["ttft.client"].mean_ms == pytest.approx(1.0)
    assert get["ttft.server"].mean_ms == pytest.approx(80.0)
    # without a round-trip probe, network and HTTP frontend stay one component
    assert get["ttft.frontend"].mean_ms == pytest.approx(19.0)
    assert "not split" in get["ttft.frontend"].label and "ttft.network" not in get
    assert get["ttft.server.queue"].mean_ms == pytest.approx(50.0)
    assert get["ttft.server.prefill"].mean_ms == pytest.approx(20.0)
    assert get["ttft.server.other"].mean_ms == pytest.approx(10.0)
    assert get["ttft.server.queue"].share == pytest.approx(0.5)
    assert result.dominant_ttft == "ttft.server.queue"
    assert get["e2e.decode"].mean_ms == pytest.approx(160.0)
    assert get["e2e.decode.engine"].mean_ms == pytest.approx(150.0)
    assert result.dominant_e2e == "e2e.decode"
    assert result.window_s == pytest.approx(4.0) and result.server_requests == 20
    assert get["ttft.frontend"].p50_ms is None  # a difference of means has no percentiles
    assert "histogram" in get["ttft.server.queue"].source
    assert result.notes == []


def test_warm_ups_finishing_inside_the_window_are_counted_on_both_sides():
    # A closed loop's warm-up flows into its measured requests: the first scrape (t=10 s) is
    # taken while 3 warm-ups still run, so the histograms over the window count 23 requests.
    # The 3 came from the warm-up's burst (280 ms server TTFT, 250 of it queued); the 20
    # measured ones have 80 ms (50 queued). Compared with the 20 alone, the server's TTFT
    # (106 ms) read above the client's 100 ms, a negative frontend.
    n, late = 20, 3
    before = _page(10, 0.5, 0.3, 0.1, 0.2, 0.8)
    after = "".join([
        _hist("vllm:time_to_first_token_seconds", 5 + 0.080 * n + 0.280 * late, 10 + n + late),
        _hist("vllm:request_queue_time_seconds", 3 + 0.050 * n + 0.250 * late, 10 + n + late),
        _hist("vllm:request_prefill_time_seconds", 1 + 0.020 * (n + late), 10 + n + late),
        _hist("vllm:request_decode_time_seconds", 2 + 0.150 * (n + late), 10 + n + late),
        _hist("vllm:e2e_request_latency_seconds", 8 + 0.230 * n + 0.430 * late, 10 + n + late),
    ])
    warm = _records(late, ttft_ms=300.0, lag_ms=1.0, decode_ms=160.0, t0_ms=9800.0)
    early = _records(2, ttft_ms=300.0, lag_ms=1.0, decode_ms=160.0, t0_ms=9000.0)  # before it
    for r in warm + early:
        r.warmup = True
    records = early + warm + _records(n, ttft_ms=100.0, lag_ms=1.0, decode_ms=160.0,
                                      t0_ms=10100.0)
    result = decompose(records, [_snap(before, 10.0), _snap(after, 14.0)])
    get = {c.key: c for c in result.components}
    assert result.client_requests == n + late and result.server_requests == n + late
    assert get["ttft"].mean_ms == pytest.approx((100.0 * n + 300.0 * late) / (n + late))
    # both sides hold the same requests: the frontend is the 19 ms each request spent there
    assert get["ttft.frontend"].mean_ms == pytest.approx(19.0)
    assert get["ttft.server.queue"].share == pytest.approx(
        (50.0 * n + 250.0 * late) / (100.0 * n + 300.0 * late))
    assert any("3 warm-up requests still running" in note for note in result.notes)
    assert not any("the server finished" in note for note in result.notes)


def test_client_lag_and_network_round_trip_are_split_off():
    before = _page(10, 0.5, 0.3, 0.1, 0.2, 0.8)
    after = _page(30, (0.5 * 10 + 0.080 * 20) / 30, (0.3 * 10 + 0.050 * 20) / 30,
                  (0.1 * 10 + 0.020 * 20) / 30, (0.2 * 10 + 0.150 * 20) / 30,
                  (0.8 * 10 + 0.230 * 20) / 30)
    result = decompose(_records(20, ttft_ms=100.0, lag_ms=1.0, decode_ms=160.0),
                       [_snap(before, 10.0), _snap(after, 14.0)],
                       client_loop_lag_ms=4.0, network_rtt_ms=12.0)
    get = {c.key: c for c in result.components}
    assert get["ttft.client"].mean_ms == pytest.approx(5.0)  # 1 ms send lag + 4 ms loop lag
    assert get["ttft.network"].mean_ms == pytest.approx(12.0)
    assert get["ttft.frontend"].mean_ms == pytest.approx(100.0 - 5.0 - 12.0 - 80.0)
    leaves = ("ttft.client", "ttft.network", "ttft.frontend", "ttft.server.queue",
              "ttft.server.prefill", "ttft.server.other")
    assert sum(get[k].mean_ms for k in leaves) == pytest.approx(100.0)


def test_latency_timed_from_the_send_has_no_send_lag_in_it():
    recs = _records(5, ttft_ms=50.0, lag_ms=3.0, decode_ms=10.0)
    for r in recs:  # as if the client's TTFT origin were the send itself
        r.scheduled_ns = r.sent_ns
    result = decompose(recs, [], client_loop_lag_ms=0.5)
    assert result.component("ttft.client").mean_ms == pytest.approx(0.5)


def test_a_closed_loop_send_lag_is_beside_ttft_not_in_it():
    # a closed loop times from the send (stats.origin_ns): its 30 ms send lag is no part of TTFT
    recs = _records(5, ttft_ms=80.0, lag_ms=30.0, decode_ms=10.0, open_loop=False)
    result = decompose(recs, [], client_loop_lag_ms=0.5)
    assert result.component("ttft").mean_ms == pytest.approx(50.0)  # first chunk - sent
    assert result.component("ttft.client").mean_ms == pytest.approx(0.5)  # loop lag only
    assert "first chunk - sent" in result.component("ttft").source


def test_per_request_timings_are_preferred_and_exact():
    # vLLM's names: time_to_first_token_ms is SCHEDULED -> first token (prefill)
    server = {"id": "cmpl-1", "metrics": {"queue_time_ms": 30.0, "time_to_first_token_ms": 12.0,
                                          "generation_time_ms": 90.0}}
    recs = _records(5, ttft_ms=60.0, lag_ms=0.5, decode_ms=95.0, server=server)
    assert per_request_server_timings(recs[0]) == {"queue": 30.0, "prefill": 12.0, "decode": 90.0}
    pages = [_snap(_page(0, 0, 0, 0, 0, 0), 0.0), _snap(_page(5, 0.050, 0.2, 0.2, 0.2, 0.2), 1.0)]
    result = decompose(recs, pages)
    queue = result.component("ttft.server.queue")
    assert queue.mean_ms == pytest.approx(30.0) and queue.p99_ms == pytest.approx(30.0)
    assert queue.p99_error_ms is None and "per-request" in queue.source
    assert result.component("ttft.server.other").mean_ms == pytest.approx(50.0 - 30.0 - 12.0)
    assert result.server_source == "histograms+per-request"


def test_histogram_quantiles_carry_their_bucket_width():
    pages = [_snap(_page(0, 0, 0, 0, 0, 0), 0.0), _snap(_page(10, 0.05, 0.05, 0.05, 0.05, 0.5), 2.0)]
    result = decompose(_records(10, 60.0, 0.1, 10.0), pages)
    ttft = result.component("ttft.server")
    assert 10.0 <= ttft.p50_ms <= 100.0 and ttft.p50_error_ms == pytest.approx(90.0)


def test_without_server_data_only_client_rows_have_values(fixtures_dir):
    disabled = (fixtures_dir / "vllm" / "cpu-vllm0.32" / "metrics_disable_log_stats.txt").read_text()
    result = decompose(_records(3, 50.0, 1.0, 10.0), [_snap(disabled, 0), _snap(disabled, 1)])
    assert result.component("ttft").mean_ms == pytest.approx(50.0)
    assert result.component("ttft.server").mean_ms is None
    assert result.server_source == "none" and any("no vllm:*" in n for n in result.notes)


def test_real_fixture_window_and_mismatch_note(fixtures_dir):
    d = fixtures_dir / "vllm" / "h200-vllm0.26"
    snaps = [_snap((d / "metrics_after_c128.txt").read_text(), 0),
             _snap((d / "metrics_after_c512.txt").read_text(), 100)]
    result = decompose(_records(4, 900.0, 1.0, 3000.0), snaps)
    server = result.component("ttft.server")
    q = result.component("ttft.server.queue")
    p = result.component("ttft.server.prefill")
    other = result.component("ttft.server.other")
    assert other.mean_ms == pytest.approx(server.mean_ms - q.mean_ms - p.mean_ms)
    assert result.server_requests > 4 and result.notes  # other traffic in the window is named


def test_decompose_run_writes_json_and_timeseries(tmp_path):
    recs = _records(5, 100.0, 1.0, 50.0)
    (tmp_path / "requests.jsonl").write_bytes(b"".join(orjson.dumps(r.to_dict()) + b"\n" for r in recs))
    (tmp_path / "manifest.json").write_text(json.dumps({"start_ns": int(9.0e9)}))
    (tmp_path / "metrics").mkdir()
    snaps = [_snap(_page(0, 0, 0, 0, 0, 0), 10.0), _snap(_page(5, 0.08, 0.05, 0.02, 0.04, 0.12), 12.0)]
    (tmp_path / "metrics" / "snapshots.jsonl").write_bytes(
        b"".join(orjson.dumps(s.to_dict()) + b"\n" for s in snaps) + b'{"t_ns": 1')  # torn tail
    result = decompose_run(tmp_path)
    saved = json.loads((tmp_path / "decomposition.json").read_text())
    assert saved["dominant_ttft"] == result.dominant_ttft == "ttft.server.queue"
    series = json.loads((tmp_path / "server_timeseries.json").read_text())["points"]
    assert [p["t_s"] for p in series] == [1.0, 3.0]
    assert series[1]["queue_mean_s"] == pytest.approx(0.05)
    assert series[1]["requests_finished_per_s"] is None  # that counter is not on these pages
