"""bench --workers 2 against the real local vLLM: records merge with no loss or duplication, and
the merged summary is what the same records give in one process."""

from __future__ import annotations

import pytest
from merged import assert_merged_summary

from latscope.stats import summarize
from latscope.load import BenchConfig, read_run
from latscope.load.workers import run_workers

pytestmark = pytest.mark.integration


def test_two_workers_on_vllm_merge_every_record_once(vllm_target, tmp_path):
    config = BenchConfig(url=vllm_target.url, num_requests=16, concurrency=4, warmup=2,
                         tokenizer=str(vllm_target.tokenizer_dir), output_dir=tmp_path / "run")
    config.workload.input_len, config.workload.output_len = "32", "8"
    result = run_workers(config, 2)
    manifest, records, summary = read_run(result.run_dir)
    measured = [r for r in records if not r.warmup]
    ids = [r.request_id for r in records]
    # 16 measured, 2 warm-up and each worker's stagger ramp (warm-up too), each once
    ramp = summary["load"]["ramp_requests_excluded"]
    assert len(ids) == len(set(ids)) == 18 + ramp and ramp >= 2
    assert len(measured) == 16 and all(r.ok for r in measured)
    assert min(r.index for r in measured) >= 2  # past the driver's warm-up
    assert {w["measured"] for w in summary["workers"]} == {8}
    # the workers' statistics merged: the summary the same records give in one process
    assert_merged_summary(summary, summarize(records, percentiles=config.percentiles))
    # ignore_eos: exactly 8 tokens a request, as the server counted them (usage), all merged
    assert summary["tokens"]["output_total"] == 16 * 8
    assert manifest["workers"]["count"] == 2 and not summary["workers_failed"]
