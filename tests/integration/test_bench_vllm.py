"""`latscope bench` against a real vLLM (the tiny model, CPU build), through the library and CLI."""

from __future__ import annotations

import json

import pytest

from latscope.cli.main import main
from latscope.load import BenchConfig, read_run, run_bench
from latscope.load.config import WorkloadSpec
from latscope.load.prepare import discover_model
from latscope.load.workload import ServerTokenizer, build_workload

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_streaming_run_exact_tokens(vllm_target, tmp_path, endpoint):
    config = BenchConfig(url=vllm_target.url, endpoint=endpoint, num_requests=8, concurrency=4,
                         tokenizer=str(vllm_target.tokenizer_dir), output_dir=tmp_path / "run",
                         per_chunk_usage=True)
    config.workload.input_len, config.workload.output_len = "48", "12"
    result = run_bench(config)
    s = result.summary
    assert s["requests"]["completed"] == 8, s["errors"]
    assert s["model"] == vllm_target.model_name
    assert s["workload"]["exact_lengths"] and s["workload"]["tokenizer"].startswith("local:")
    for r in result.records:
        # ignore_eos: exactly max_tokens, as counted by the server itself
        assert (r.output_tokens, r.output_tokens_source) == (12, "usage")
        assert sum(r.chunk_tokens) == 12 and len(r.chunk_ns) == len(r.chunk_tokens)
        assert r.scheduled_ns <= r.sent_ns <= r.headers_ns <= r.first_token_ns <= r.end_ns
    prompt_tokens = {r.prompt_tokens for r in result.records}
    if endpoint == "completions":  # exact text length; the server may add one BOS token
        assert prompt_tokens <= {48, 49} and len(prompt_tokens) == 1
    else:  # the chat template adds the same tokens to every prompt
        assert len(prompt_tokens) == 1 and prompt_tokens.pop() > 48
    measured = [r for r in result.records if not r.warmup]  # past the stagger's ramp
    assert s["ttft_ms"]["count"] == 8 and s["ttft_ms"]["min"] > 0
    assert s["itl_ms"]["count"] == sum(len(r.chunk_ns) - 1 for r in measured)
    manifest, records, summary = read_run(result.run_dir)
    assert len(measured) == 8 and summary["requests"] == s["requests"]
    assert len(records) - 8 == s["requests"]["warmup_excluded"] == \
        s["load"]["ramp_requests_excluded"]


def test_cli_prints_table_and_writes_run(vllm_target, tmp_path, capsys):
    out = tmp_path / "cli"
    rc = main(["bench", "--url", vllm_target.url, "-n", "6", "-c", "3", "--input-len", "32",
               "--output-len", "8", "--no-progress", "--scrape-interval", "0",
               "--output-dir", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "TTFT" in text and "output tokens/s" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["completed"] == 6
    # no --tokenizer: the server's own model folder, on this host and checked against its
    # /tokenize, gives exact counts without a round trip per prompt
    assert summary["workload"]["tokenizer"].startswith("local:")
    assert "matches its /tokenize" in summary["workload"]["tokenizer"]
    # where the folder is not here, the server's /tokenize does, over one connection
    tok = ServerTokenizer(vllm_target.url, discover_model(vllm_target.url, {}), {})
    workload = build_workload(WorkloadSpec(input_len="40"), 4, tok, seed=0)
    assert tok.connections == 1
    assert workload.exact and [p.prompt_tokens for p in workload.prompts] == [40] * 4
    assert all(len(tok.encode(p.text)) == 40 for p in workload.prompts)


def test_non_streaming(vllm_target, tmp_path):
    config = BenchConfig(url=vllm_target.url, num_requests=3, concurrency=3, stream=False,
                         output_dir=tmp_path / "ns")
    config.workload.output_len = "5"
    result = run_bench(config)
    assert result.summary["requests"]["completed"] == 3
    assert all(r.output_tokens == 5 and r.first_token_ns is None for r in result.records)
    assert result.summary["e2e_ms"]["count"] == 3 and result.summary["ttft_ms"]["count"] == 0
