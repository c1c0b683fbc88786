"""Re-capture the span sample in this folder from a real local vLLM (CPU build, tiny model).

    PYTHONPATH=src python3 tests/data/otlp/capture.py

Starts a ``SpanCollector``, a ``LocalTarget`` with tracing on and ``--max-num-seqs 2``, sends 24
traced requests at concurrency 16 (a 75/25 short/long mix) and keeps: ``requests.jsonl``,
``spans.jsonl``, ``manifest.json`` (the run), ``export_request.bin`` (the first raw OTLP/HTTP
body with request spans, as vLLM sent it), ``export_startup.bin`` (the first body vLLM sent: its
start-up spans) and ``vllm_version.txt``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from latscope.load import BenchConfig, WorkloadSpec, run_bench
from latscope.load.config import parse_mix
from latscope.server.otlp import SpanCollector
from latscope.server.otlp_record import SpanRecorder
from latscope.server.target import LocalTarget

HERE = Path(__file__).resolve().parent


def main() -> int:
    import vllm

    raw: list[bytes] = []  # the first body, then the first one with llm_request spans
    with SpanCollector() as collector, tempfile.TemporaryDirectory() as tmp:
        original = collector.handle_body

        def keep_first(body: bytes, encoding: str = "") -> None:
            if not raw or (len(raw) == 1 and b"llm_request" in body):
                raw.append(body)
            return original(body, encoding)

        collector.handle_body = keep_first  # type: ignore[method-assign]
        target = LocalTarget(serve_args=["--max-num-seqs", "2"], log_dir=tmp,
                             otlp_endpoint=collector.http_endpoint)
        with target:
            workload = WorkloadSpec(mix=parse_mix("short:0.75:32:16,long:0.25:384:16"))
            config = BenchConfig(url=target.url, num_requests=24, concurrency=16,
                                 workload=workload, trace_requests=True,
                                 tokenizer=str(target.tokenizer_dir),
                                 output_dir=Path(tmp) / "run")
            recorder = SpanRecorder(collector)
            result = run_bench(config, [recorder],
                               on_record=lambda r: recorder.expect(r.trace_id))
        for name in ("requests.jsonl", "spans.jsonl", "manifest.json"):
            shutil.copy(result.run_dir / name, HERE / name)
    (HERE / "export_startup.bin").write_bytes(raw[0])
    (HERE / "export_request.bin").write_bytes(raw[-1])
    (HERE / "vllm_version.txt").write_text(f"{vllm.__version__}\n")
    print(f"{recorder.spans} spans, {len(result.records)} records -> {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
