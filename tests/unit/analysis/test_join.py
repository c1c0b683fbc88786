"""The join of client records and server spans, on a run captured from the real vLLM 0.32 (CPU,
tiny model, --max-num-seqs 2, 24 requests at concurrency 16, a 75/25 short/long mix; see
tests/data/otlp/capture.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from latscope.analysis.decompose import decompose, decompose_run
from latscope.analysis.join import join_spans, request_spans
from latscope.report.perrequest import WIDTH, per_request_lines
from latscope.rundir import read_run
from latscope.server.otlp_record import read_spans
from latscope.stats import ttft_ms

DATA = Path(__file__).resolve().parents[2] / "data" / "otlp"


@pytest.fixture(scope="module")
def run():
    _, records, _ = read_run(DATA)
    return records, read_spans(DATA)


def test_every_completed_request_is_joined(run) -> None:
    records, spans = run
    split = join_spans(records, spans)
    completed = [r for r in records if r.ok and not r.warmup]
    assert split.completed == len(completed) == split.joined
    assert split.without_span == split.untraced == split.other_spans == 0
    assert split.coverage == 1.0 and not split.notes


def test_each_row_is_the_span_of_its_own_request(run) -> None:
    records, spans = run
    by_trace = request_spans(spans)
    split = join_spans(records, spans)
    by_index = {r.index: r for r in records}
    for row in split.rows:
        span = by_trace[row.trace_id]
        record = by_index[row.index]
        assert record.trace_id == row.trace_id
        assert row.client_ttft_ms == ttft_ms(record)
        attrs = span.attributes
        assert row.queue_ms == pytest.approx(attrs["gen_ai.latency.time_in_queue"] * 1e3)
        assert row.server_ttft_ms == pytest.approx(
            attrs["gen_ai.latency.time_to_first_token"] * 1e3)
        # vLLM's request id carries ours (x-request-id): an independent check of the pairing
        assert record.request_id in attrs["gen_ai.request.id"]
        assert row.frontend_network_ms == pytest.approx(
            row.client_ttft_ms - row.send_lag_ms - row.server_ttft_ms)
        assert row.other_ms == pytest.approx(row.server_ttft_ms - row.queue_ms - row.prefill_ms)
        # one host, one clock rate: the server's TTFT lies inside the client's
        assert 0 < row.server_ttft_ms <= row.client_ttft_ms


def test_queueing_shows_per_request_under_max_num_seqs_2(run) -> None:
    split = join_spans(*run)
    first_two = split.rows[:2]  # in send order
    assert all(r.queue_ms < 20 for r in first_two)
    later = split.rows[2:]
    assert all(r.queue_ms > 5 * max(f.queue_ms for f in first_two) for r in later)
    assert split.stats["queue_ms"]["p99"] > split.stats["prefill_ms"]["p50"]
    # first come, first served: the later a request was sent, the longer it waited
    from scipy.stats import spearmanr
    assert spearmanr(range(len(split.rows)), [r.queue_ms for r in split.rows])[0] > 0.7
    assert split.slowest[0].client_ttft_ms == max(r.client_ttft_ms for r in split.rows)


def test_groups_of_the_mix_have_their_own_split(run) -> None:
    split = join_spans(*run)
    assert set(split.groups) == {"short", "long"}
    long_, short = split.groups["long"], split.groups["short"]
    assert long_["client_ttft_ms"]["count"] + short["client_ttft_ms"]["count"] == split.joined
    # 384-token prompts take longer to prefill than 32-token ones
    assert long_["prefill_ms"]["p50"] > 2 * short["prefill_ms"]["p50"]


def test_missing_spans_are_counted_and_said(run) -> None:
    records, spans = run
    by_trace = request_spans(spans)
    dropped = {records[0].trace_id, records[1].trace_id}
    kept = [s for s in spans if s.trace_id not in dropped]
    stray = msgspec.structs.replace(spans[0], trace_id="f" * 32)
    split = join_spans(records, kept + [stray])
    assert split.joined == len(by_trace) - 2 and split.without_span == 2
    assert split.other_spans == 1
    assert any("2 of 24 completed requests got no span" in n for n in split.notes)


def test_decompose_takes_spans_first_and_says_so(run) -> None:
    records, spans = run
    result = decompose(records, [], split=join_spans(records, spans))
    for key in ("ttft.server", "ttft.server.queue", "ttft.server.prefill", "ttft.frontend",
                "ttft.server.other", "e2e.decode.engine"):
        comp = result.component(key)
        assert comp is not None and comp.source.startswith("per-request spans (OTLP)"), key
        assert comp.p99_ms is not None and comp.count == 24
        assert comp.p50_error_ms is None  # exact, not a bucket
    assert result.server_source == "spans"
    assert result.dominant_ttft == "ttft.server.queue"
    data = result.to_dict()
    assert data["per_request"]["joined"] == 24 and "rows" not in data["per_request"]


def test_too_few_joined_requests_fall_back_to_the_next_source(run) -> None:
    records, spans = run
    few = [s for s in spans if s.trace_id in {r.trace_id for r in records[:12]}]
    result = decompose(records, [], split=join_spans(records, few))
    assert not result.component("ttft.server.queue").source.startswith("per-request spans")
    assert any("only 12 of 24 requests were joined" in n for n in result.notes)


def test_decompose_run_writes_the_rows_and_a_traced_run_without_spans_says_so(
        run, tmp_path: Path) -> None:
    import shutil

    for name in ("requests.jsonl", "manifest.json", "spans.jsonl"):
        shutil.copy(DATA / name, tmp_path / name)
    result = decompose_run(tmp_path)
    assert result.split is not None and result.split.joined == 24
    assert (tmp_path / "per_request.json").is_file()
    (tmp_path / "spans.jsonl").unlink()
    (tmp_path / "otlp.json").write_text("{}")  # the receiver ran, but nothing came
    result = decompose_run(tmp_path)
    assert result.split is None
    assert any("server sent no request spans" in n for n in result.notes)


def test_the_table_fits_80_columns_and_names_every_component(run) -> None:
    lines = per_request_lines(join_spans(*run))
    assert max(len(line) for line in lines) <= WIDTH
    text = "\n".join(lines)
    for label in ("queue", "prefill", "server TTFT", "network + HTTP frontend", "Slowest",
                  "short", "long"):
        assert label in text


def test_vllm_startup_spans_are_not_request_spans() -> None:
    from latscope.server.otlp_decode import decode_export_request

    startup = decode_export_request((DATA / "export_startup.bin").read_bytes())
    assert {s.name for s in startup} >= {"Worker init"}
    assert request_spans(startup) == {}


def test_the_frontend_row_from_spans_leaves_out_the_clients_receive_delay(run) -> None:
    records, spans = run
    split = join_spans(records, spans)
    plain = decompose(records, [], split=split).component("ttft.frontend")
    lagged = decompose(records, [], split=split, client_loop_lag_ms=2.0).component("ttft.frontend")
    assert plain.mean_ms == pytest.approx(split.stats["frontend_network_ms"]["mean"])
    assert lagged.mean_ms == pytest.approx(plain.mean_ms - 2.0)
    assert lagged.p99_ms == pytest.approx(plain.p99_ms - 2.0)
