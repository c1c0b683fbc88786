"""The OTLP receiver: real bodies from vLLM 0.32, the real OpenTelemetry SDK exporters (HTTP and
gRPC) sending to it, and the per-run recorder's file and wait."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import time
from pathlib import Path

import orjson
import pytest

from latscope.errors import ConfigError, LatscopeError
from latscope.model import RunContext
from latscope.server.otlp import SpanCollector, parse_listen, remote_instructions
from latscope.server.otlp_decode import decode_export_request
from latscope.server.otlp_record import RAW_FILE, SPANS_FILE, STATUS_FILE, SpanRecorder, read_spans

DATA = Path(__file__).resolve().parents[2] / "data" / "otlp"


def _ctx(run_dir: Path) -> RunContext:
    return RunContext(base_url="http://127.0.0.1:1", run_dir=run_dir, headers={},
                      start_ns=time.perf_counter_ns(), start_wall=time.time())


def _post(collector: SpanCollector, body: bytes, *, ctype: str = "application/x-protobuf",
          encoding: str | None = None, path: str = "/v1/traces") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", collector.port, timeout=5)
    headers = {"content-type": ctype}
    if encoding:
        headers["content-encoding"] = encoding
    conn.request("POST", path, body=body, headers=headers)
    status = conn.getresponse().status
    conn.close()
    return status


def test_decodes_a_real_vllm_export_request() -> None:
    spans = decode_export_request((DATA / "export_request.bin").read_bytes())
    assert spans, "the captured body holds at least one span"
    span = spans[0]
    assert span.name == "llm_request" and span.kind == "server"
    assert len(span.trace_id) == 32 and len(span.span_id) == 16
    # vLLM made it a child of the traceparent we sent: parent id = first 16 hex of the trace id
    assert span.parent_span_id == span.trace_id[:16]
    attrs = span.attributes
    for key in ("gen_ai.latency.time_to_first_token", "gen_ai.latency.time_in_queue",
                "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.e2e"):
        assert isinstance(attrs[key], float)
    # seconds, and TTFT from arrival covers queue + prefill
    assert 0 < attrs["gen_ai.latency.time_to_first_token"] < 60
    assert attrs["gen_ai.latency.time_to_first_token"] >= (
        attrs["gen_ai.latency.time_in_queue"] + attrs["gen_ai.latency.time_in_model_prefill"])
    assert span.end_unix_ns > span.start_unix_ns > 1.6e18
    assert span.resource["vllm.instrumenting_module_name"] == "vllm.llm_engine"


def test_garbage_is_refused_with_a_value_error() -> None:
    with pytest.raises(ValueError, match="OTLP"):
        decode_export_request(b"\xff\xff\xff not protobuf")


def test_http_receiver_writes_spans_of_its_run_and_counts_bad_bodies(tmp_path: Path) -> None:
    body = (DATA / "export_request.bin").read_bytes()
    expected = len(decode_export_request(body))
    with SpanCollector() as collector:
        assert _post(collector, body) == 200  # before the run: not in its file
        recorder = SpanRecorder(collector, max_wait_s=0.5, quiet_s=0.1)
        asyncio.run(recorder.start(_ctx(tmp_path)))
        assert _post(collector, body) == 200
        # during the run nothing is decoded: the body is only kept, raw
        assert (tmp_path / RAW_FILE).stat().st_size > len(body)
        assert (tmp_path / SPANS_FILE).read_bytes() == b""
        assert _post(collector, gzip.compress(body), encoding="gzip") == 200
        assert _post(collector, b"junk\xff\xff") == 400
        assert _post(collector, body, ctype="application/json") == 415
        assert _post(collector, body, path="/v1/metrics") == 404
        asyncio.run(recorder.stop(_ctx(tmp_path)))
        assert _post(collector, body) == 200  # after the run: not in its file either
    spans = read_spans(tmp_path)
    assert len(spans) == 2 * expected
    status = orjson.loads((tmp_path / STATUS_FILE).read_bytes())
    assert status["spans"] == 2 * expected
    assert status["collector_requests"] == 3  # written at stop: the last body came after
    assert status["rejected_requests"] == 2  # the junk body and the JSON one


def _sdk_exporter_send(exporter, trace_ids: list[int]) -> None:
    """Spans made by the real OpenTelemetry SDK, exported by its real OTLP exporter."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    exporter.shutdown = lambda: None  # keep its session (and connection) for a later send
    tracer = provider.get_tracer("test")
    for tid in trace_ids:
        parent = NonRecordingSpan(SpanContext(tid, tid >> 64, is_remote=True,
                                              trace_flags=TraceFlags(1)))
        span = tracer.start_span("llm_request", context=set_span_in_context(parent),
                                 attributes={"gen_ai.latency.time_to_first_token": 0.25})
        span.end()
    provider.shutdown()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_real_sdk_exporters_reach_the_receiver(tmp_path: Path, protocol: str) -> None:
    trace_ids = [0x1234 << 64 | i for i in range(1, 4)]
    with SpanCollector(grpc_listen="127.0.0.1:0" if protocol == "grpc" else None) as collector:
        recorder = SpanRecorder(collector, max_wait_s=5.0)
        for tid in trace_ids:
            recorder.expect(f"{tid:032x}")
        asyncio.run(recorder.start(_ctx(tmp_path)))
        if protocol == "http":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            exporter = OTLPSpanExporter(endpoint=collector.http_endpoint)
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            assert collector.grpc_endpoint is not None
            exporter = OTLPSpanExporter(endpoint=collector.grpc_endpoint, insecure=True)
        _sdk_exporter_send(exporter, trace_ids)
        asyncio.run(recorder.stop(_ctx(tmp_path)))
    spans = read_spans(tmp_path)
    assert sorted(s.trace_id for s in spans) == [f"{t:032x}" for t in trace_ids]
    assert all(s.attributes["gen_ai.latency.time_to_first_token"] == 0.25 for s in spans)
    assert recorder.status()["expected_missing"] == 0


def test_a_new_collector_on_the_port_gets_a_kept_alive_exporters_next_spans(
        tmp_path: Path) -> None:
    """vLLM's exporter keeps its connection open; a closed collector must not keep serving it."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    with SpanCollector() as first:
        port = first.port
        exporter = OTLPSpanExporter(endpoint=first.http_endpoint)
        _sdk_exporter_send(exporter, [0x1 << 64 | 1])  # opens the keep-alive connection
        assert first.requests == 1
    with SpanCollector(f"127.0.0.1:{port}") as second:
        recorder = SpanRecorder(second, max_wait_s=5.0)
        recorder.expect(f"{0x2 << 64 | 2:032x}")
        asyncio.run(recorder.start(_ctx(tmp_path)))
        _sdk_exporter_send(exporter, [0x2 << 64 | 2])
        asyncio.run(recorder.stop(_ctx(tmp_path)))
    assert [s.trace_id for s in read_spans(tmp_path)] == [f"{0x2 << 64 | 2:032x}"]


def test_stop_waits_for_expected_late_spans_and_no_longer(tmp_path: Path) -> None:
    body = (DATA / "export_request.bin").read_bytes()
    late_trace = decode_export_request(body)[0].trace_id
    with SpanCollector() as collector:
        recorder = SpanRecorder(collector, max_wait_s=5.0)
        recorder.expect(late_trace)

        async def run() -> float:
            await recorder.start(_ctx(tmp_path))
            loop = asyncio.get_running_loop()
            loop.call_later(0.4, lambda: loop.run_in_executor(None, _post, collector, body))
            t0 = time.monotonic()
            await recorder.stop(_ctx(tmp_path))
            return time.monotonic() - t0

        waited = asyncio.run(run())
    assert 0.3 < waited < 4.0  # waited for the late batch, stopped once it came
    assert late_trace in {s.trace_id for s in read_spans(tmp_path)}


def test_stop_gives_up_at_max_wait_for_a_span_that_never_comes(tmp_path: Path) -> None:
    with SpanCollector() as collector:
        recorder = SpanRecorder(collector, max_wait_s=0.3)
        recorder.expect("ab" * 16)
        asyncio.run(recorder.start(_ctx(tmp_path)))
        t0 = time.monotonic()
        asyncio.run(recorder.stop(_ctx(tmp_path)))
        assert time.monotonic() - t0 < 2.0
    assert recorder.status()["expected_missing"] == 1
    assert (tmp_path / SPANS_FILE).read_bytes() == b""


def test_a_run_killed_before_stop_keeps_its_spans_raw_and_reads_them(tmp_path: Path) -> None:
    body = (DATA / "export_request.bin").read_bytes()
    with SpanCollector() as collector:
        recorder = SpanRecorder(collector)
        asyncio.run(recorder.start(_ctx(tmp_path)))
        assert _post(collector, body) == 200
        assert _post(collector, body) == 200
        collector.remove_sink(recorder._sink)  # the process dies here: no stop
    with (tmp_path / RAW_FILE).open("ab") as raw:
        raw.write(b"\x01\x02\x03")  # a torn last frame
    spans = read_spans(tmp_path)
    assert len(spans) == 2 * len(decode_export_request(body))
    assert all(s.received_unix_ns > 1.6e18 for s in spans)


def test_read_spans_skips_a_torn_last_line_but_not_a_torn_middle(tmp_path: Path) -> None:
    good = (DATA / SPANS_FILE).read_bytes().split(b"\n")[0]  # a span the recorder wrote
    (tmp_path / SPANS_FILE).write_bytes(good + b"\n" + good + b"\n{\"trace_")
    assert len(read_spans(tmp_path)) == 2
    (tmp_path / SPANS_FILE).write_bytes(good + b"\n{\"tra\n" + good + b"\n")
    with pytest.raises(LatscopeError, match="line 2"):
        read_spans(tmp_path)
    assert read_spans(tmp_path / "nothing-here") == []


def test_a_line_that_is_json_but_no_span_is_refused_naming_the_key(tmp_path: Path) -> None:
    good = (DATA / SPANS_FILE).read_bytes().split(b"\n")[0]
    (tmp_path / SPANS_FILE).write_bytes(good + b"\n" + orjson.dumps({"trace_id": 7}) + b"\n")
    with pytest.raises(LatscopeError) as err:
        read_spans(tmp_path)
    assert str(err.value) == (f"{tmp_path / SPANS_FILE}: line 2 is not a span latscope wrote "
                              "(Expected `str`, got `int` - at `$.trace_id`)")


def test_listen_addresses_and_remote_hints() -> None:
    assert parse_listen("0.0.0.0:4318") == ("0.0.0.0", 4318)
    assert parse_listen(":0") == ("127.0.0.1", 0)
    with pytest.raises(ConfigError):
        parse_listen("host:port")
    with SpanCollector("127.0.0.1:0") as collector:
        hints = "\n".join(remote_instructions(collector))
    assert f"--otlp-traces-endpoint {collector.http_endpoint}" in hints
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf" in hints
    assert "loopback" in hints


def test_a_taken_port_is_a_one_line_config_error() -> None:
    with SpanCollector() as first:
        with pytest.raises(ConfigError, match="cannot listen"):
            SpanCollector(f"127.0.0.1:{first.port}").start()


def test_the_client_sends_a_sampled_traceparent_only_when_tracing() -> None:
    from latscope.load.client import StreamingClient

    tid = "0af7651916cd43dd8448eb211c80319c"
    traced = StreamingClient("http://127.0.0.1:1", "/v1/completions", {}, 5.0, trace=True)
    head = traced.request_bytes("latscope-x-1", b"{}", tid).split(b"\r\n\r\n")[0].split(b"\r\n")
    assert f"traceparent: 00-{tid}-{tid[:16]}-01".encode() in head
    assert b"x-request-id: latscope-x-1" in head and b"content-length: 2" in head
    plain = StreamingClient("http://127.0.0.1:1", "/v1/completions", {}, 5.0)
    assert b"traceparent" not in plain.request_bytes("latscope-x-1", b"{}", tid)
