"""vLLM log parsing and log findings, on the real fixture logs and on lines written in the exact
formats quoted (from vLLM's source) in shared/docs/vllm-facts.md section 2."""

from __future__ import annotations

import re

import pytest

from latscope.findings.server import effective_max_num_seqs, findings_from_log
from latscope.cli.main import main
from latscope.model import Severity
from latscope.server.logs import parse_log, strip_ansi


def _log(fixtures_dir, rel):
    return fixtures_dir / "vllm" / rel


def _count(path, pattern):
    return sum(1 for line in path.read_text(errors="replace").splitlines() if re.search(pattern, line))


def test_cpu_032_startup_config(fixtures_dir):
    log = parse_log(_log(fixtures_dir, "cpu-vllm0.32/server.log"))
    cfg = log.config
    assert cfg["version"] == "0.32.0"
    assert cfg["kv_device"] == "CPU" and cfg["kv_cache_tokens"] == 1_048_576
    assert cfg["max_concurrency"] == 512.0
    assert cfg["enforce_eager"] is True and cfg["cudagraph_mode"] == "NONE"
    assert cfg["chunked_prefill"] is True and cfg["prefix_caching"] is True
    assert cfg["non_default_args"]["max_model_len"] == 2048
    assert cfg["log_level"] == "INFO" and cfg["request_logging"] is False
    assert log.stats and len(log.stats) == _count(log_path := _log(fixtures_dir, "cpu-vllm0.32/server.log"),
                                                  r"Avg prompt throughput")
    assert max(p.running for p in log.stats) == 14  # "Running: 14 reqs" at 04:26:52
    assert all(p.kv_device == "CPU" for p in log.stats)
    # max_num_seqs is logged only at DEBUG: at INFO, the CPU KV cache gives vLLM's CPU default
    # (the DEBUG log of the same build says "Defaulting max_num_seqs to 128")
    seqs, source = effective_max_num_seqs(log)
    assert seqs == 128 and source.startswith("inferred: vLLM's CPU default")
    assert effective_max_num_seqs(parse_log(_log(fixtures_dir, "cpu-vllm0.32/server_debug.log"))) \
        [0] == 128
    assert log.line_rate.access_log_lines == _count(log_path, r'"POST /v1/')
    assert findings_from_log(log) == []  # a default INFO server at low load: nothing to say


def test_debug_log_is_flagged_with_its_line_rate(fixtures_dir):
    path = _log(fixtures_dir, "cpu-vllm0.32/server_debug.log")
    log = parse_log(path)
    cfg = log.config
    assert cfg["log_level"] == "DEBUG"
    assert cfg["max_num_seqs"] == 128 and cfg["max_num_batched_tokens"] == 2048  # DEBUG defaults
    assert cfg["unknown_env_vars"] == ["VLLM_TORCH_PROFILER_DIR"]
    assert log.line_rate.step_lines == _count(path, r"\] Running batch with")
    assert log.line_rate.by_level["DEBUG"] == _count(path, r"\) DEBUG \d\d-\d\d ")
    ids = {f.id: f for f in findings_from_log(log)}
    assert ids["server.debug_logging"].severity == Severity.WARNING
    # DEBUG stats lines (idle periods) are parsed too
    assert any(p.level == "DEBUG" for p in log.stats)


def test_h200_026_token_budget_queue(fixtures_dir):
    log = parse_log(_log(fixtures_dir, "h200-vllm0.26/server.log"))
    cfg = log.config
    assert cfg["version"] == "0.26.0"
    assert cfg["attention_backend"] == "FLASH_ATTN"
    assert cfg["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert cfg["max_num_batched_tokens"] == 8192 and cfg["kv_cache_tokens"] == 919_824
    assert cfg["max_concurrency"] == 112.28 and cfg["kv_device"] == "GPU"
    assert cfg["max_num_seqs"] is None  # never logged at INFO ...
    assert effective_max_num_seqs(log)[0] == 1024  # ... so the documented default for 139.8 GiB
    point = next(p for p in log.stats if p.waiting == 204)
    assert (point.running, point.kv_usage_pct) == (307, 34.9)
    finding = next(f for f in findings_from_log(log) if f.id == "server.queue_token_budget")
    assert finding.severity == Severity.WARNING and finding.layer == "queue"
    values = {e.name: e.value for e in finding.evidence}
    assert values["Running"] == 307 and values["Waiting"] == 204
    assert values["max_num_batched_tokens"] == 8192


V0102_STATS = ("\x1b[1;36m(APIServer pid=7)\x1b[0;0m INFO 09-10 10:00:{s:02d} [loggers.py:123] "
               "Engine 000: Avg prompt throughput: 1000.0 tokens/s, Avg generation throughput: "
               "50.5 tokens/s, Running: 256 reqs, Waiting: 40 reqs, GPU KV cache usage: {kv:.1f}%, "
               "Prefix cache hit rate: 3.0%")
V033_STATS = ("(APIServer pid=9) INFO 01-02 03:04:{s:02d} [v1/metrics/loggers.py:1] 2 Engines "
              "Aggregated: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 5.0 "
              "tokens/s, Running: 8 reqs, Waiting: 3 reqs, Deferred: 1 reqs, Preemptions: {p}, "
              "GPU KV cache usage: 99.0%, Prefix cache hit rate: 1.0%")


def test_v0102_ansi_stats_and_kv_saturation():
    lines = [V0102_STATS.format(s=s, kv=kv) for s, kv in ((0, 91.0), (10, 97.5), (20, 50.0))]
    assert "\x1b" not in strip_ansi(lines[0])
    log = parse_log(lines)
    assert [p.kv_usage_pct for p in log.stats] == [91.0, 97.5, 50.0]
    assert [p.t_s for p in log.stats] == [0.0, 10.0, 20.0]
    assert log.stats[0].running == 256 and log.stats[0].kv_device == "GPU"
    kv = next(f for f in findings_from_log(log) if f.id == "server.kv_saturation")
    assert kv.severity == Severity.WARNING and "97.5" in kv.title


def test_v033_optional_parts_and_preemptions():
    log = parse_log([V033_STATS.format(s=0, p=3), V033_STATS.format(s=10, p=4)])
    p = log.stats[0]
    assert (p.engine, p.deferred, p.preemptions, p.waiting) == ("all(2)", 1, 3, 3)
    pre = next(f for f in findings_from_log(log) if f.id == "server.preemptions")
    assert pre.evidence[0].value == 7


def test_request_logging_and_full_batch_queue():
    lines = ["(APIServer pid=1) INFO 01-01 00:00:00 [api_utils.py:1] non-default args: "
             "{'model': '/m', 'max_num_seqs': 2, 'enable_log_requests': True, "
             "'compilation_config': CompilationConfig(mode=0)}"]
    for i in range(4):
        lines.append(f"(APIServer pid=1) INFO 01-01 00:00:0{i} [logger.py:1] Received request "
                     f"cmpl-{i}: params: SamplingParams(n=1), lora_request: None.")
        lines.append(f"(APIServer pid=1) INFO 01-01 00:00:0{i} [async_llm.py:1] Added request cmpl-{i}.")
        lines.append('(APIServer pid=1) INFO:     127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 OK')
    for s in (10, 20):
        lines.append(f"(APIServer pid=1) INFO 01-01 00:00:{s} [loggers.py:1] Engine 000: Avg prompt "
                     "throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 2 "
                     "reqs, Waiting: 14 reqs, GPU KV cache usage: 1.0%")
    log = parse_log(lines)
    assert log.config["max_num_seqs"] == 2 and log.config["request_logging"] is True
    assert "CompilationConfig" in log.config["non_default_args"]["compilation_config"]
    assert log.line_rate.requests == 4 and log.line_rate.request_lines_per_request == 3.0
    ids = {f.id: f for f in findings_from_log(log)}
    assert ids["server.request_logging"].severity == Severity.WARNING
    assert ids["server.queue_max_num_seqs"].severity == Severity.WARNING
    assert "server.queue_token_budget" not in ids  # the batch is full: not a token-budget queue
    # one stats line at the cap with a queue is vLLM's own count of it binding: as much a finding
    one = parse_log(lines[:-1])
    assert len(one.stats) == 1
    found = {f.id: f for f in findings_from_log(one)}["server.queue_max_num_seqs"]
    assert found.severity == Severity.WARNING


@pytest.mark.parametrize("rel", ["cpu-vllm0.32/server.log", "cpu-vllm0.32/server_debug.log",
                                 "h200-vllm0.26/server.log"])
def test_cli_logs_reads_every_fixture(fixtures_dir, rel, tmp_path, capsys):
    out = tmp_path / "log.json"
    assert main(["logs", str(_log(fixtures_dir, rel)), "-o", str(out)]) == 0
    import json
    data = json.loads((out / "log.json").read_text())
    assert data["log"]["config"]["version"] and data["log"]["stats"]
    assert "Server configuration" in capsys.readouterr().out


def test_cli_logs_missing_file_is_one_line_error(capsys):
    assert main(["logs", "/nonexistent/server.log"]) == 1
    assert capsys.readouterr().err.startswith("error: ")


_PREFIX = "(EngineCore_DP0 pid=3) INFO 05-06 07:08:09 [x.py:1] "


@pytest.mark.parametrize("message, key, expected", [
    # attention backend lines of 0.10 ROCm, 0.13 ROCm, 0.33 ROCm and CUDA 0.13+ (facts doc sec. 2)
    ("Using Triton Attention backend on V1 engine.", "attention_backend", "Triton Attention"),
    ("Using Aiter Flash Attention backend on V1 engine.", "attention_backend", "Aiter Flash Attention"),
    ("Using ROCM_AITER_FA backend out of potential backends: ['ROCM_AITER_FA', 'TRITON_ATTN'].",
     "attention_backend", "ROCM_AITER_FA"),
    ("Using FLASHINFER attention backend out of potential backends: ['FLASHINFER']",
     "attention_backend", "FLASHINFER"),
    ("vLLM API server version 0.10.2", "version", "0.10.2"),
    ("vLLM server version 0.33.0, serving model /m", "version", "0.33.0"),
    ("Cudagraph is disabled under eager mode", "cudagraph_mode", "NONE"),
    ("Chunked prefill is enabled with max_num_batched_tokens=16384.", "max_num_batched_tokens", 16384),
])
def test_startup_line_forms_across_versions(message, key, expected):
    assert parse_log([_PREFIX + message]).config[key] == expected


def test_gzipped_log_reads_like_the_plain_one(fixtures_dir, tmp_path):
    import gzip

    plain = _log(fixtures_dir, "h200-vllm0.26/server.log")
    packed = tmp_path / "server.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = parse_log(plain), parse_log(packed)
    assert a.config == b.config and len(a.stats) == len(b.stats) > 0


def test_non_default_args_never_keep_secrets(tmp_path):
    # vLLM logs every non-default CLI arg, --api-key and --hf-token values included (format of
    # the fixture logs' api_utils.py line); `latscope logs` prints and writes this dict.
    log_file = tmp_path / "server.log"
    log_file.write_text(
        "(APIServer pid=1) INFO 11-30 04:25:28 [api_utils.py:286] non-default args: "
        "{'model_tag': '/srv/m', 'api_key': ['sk-live-SECRET1'], 'hf_token': 'hf_SECRET2', "
        "'max_num_batched_tokens': 4096, 'max_model_len': 2048}\n")
    log = parse_log(log_file)
    args = log.config["non_default_args"]
    assert args["api_key"] == "***" and args["hf_token"] == "***"
    assert args["max_num_batched_tokens"] == 4096 and args["max_model_len"] == 2048
    assert "SECRET" not in repr(log.to_dict())


def test_unreadable_logs_are_one_line_errors(tmp_path, capsys):
    import gzip

    from latscope.errors import ConfigError

    fake_gz = tmp_path / "server.log.1.gz"
    fake_gz.write_text("INFO plain text, not gzip\n")
    with pytest.raises(ConfigError, match="cannot read log"):
        parse_log(fake_gz)
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(b"INFO 11-30 04:25:28 [x.py:1] hello\n" * 200)[:-30])
    assert main(["logs", str(cut)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "cannot read log" in err and err.count("\n") == 1


def test_cited_line_numbers_are_grep_line_numbers_past_progress_bars(fixtures_dir):
    # this log's CUDA-graph tqdm bars redraw with bare "\r" inside lines 40-41: a reader that
    # took each "\r" as a line end cited line 78 for what grep -n and an editor show at line 42
    path = _log(fixtures_dir, "h200-vllm0.26/server.log")
    physical = path.read_bytes().split(b"\n")  # what grep -n counts
    assert any(b"\r" in line.rstrip(b"\r") for line in physical[:45])  # the bars are there
    log = parse_log(path)
    expected = {"graph_capture_gib": b"Graph capturing finished",
                "profiler_enabled": b"Torch profiler enabled",
                "kv_cache_tokens": b"KV cache size",
                "max_num_batched_tokens": b"max_num_batched_tokens=8192"}
    for key, text in expected.items():
        assert text in physical[log.config_lines[key] - 1], key
    # records after a bar in the same line are still read
    assert log.config["graph_capture_gib"] == pytest.approx(0.98)
