"""Fixtures for the trace tests: paths of the real sample traces (``traces_dir``: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from latscope.trace.readers import read_trace

KINETO = {
    "mi250": "amd_mi250_hta_minitoy_rocm6.2.pt.trace.json.gz",
    "mi300x_hf": "amd_mi300x_hf_qwen1.5-0.5b.pt.trace.json.gz",
    "sglang": "amd_mi300x_sglang_qwen3-8b_decode.pt.trace.json.gz",
    "fullgraph": "amd_mi300x_vllm_gptoss_decode_fullgraph.pt.trace.json.gz",
    "piecewise": "amd_mi300x_vllm_gptoss_prefilldecode_piecewise.pt.trace.json.gz",
    "b200": "nvidia_b200_vllm_eager_tp8.pt.trace.json.gz",
    "h100": "nvidia_h100_hf_qwen1.5-0.5b.pt.trace.json.gz",
}


@pytest.fixture(scope="session")
def kineto_path(traces_dir: Path):
    return lambda key: traces_dir / KINETO[key]


@pytest.fixture(scope="session")
def loaded(traces_dir: Path):
    cache: dict[str, object] = {}

    def load(key: str):
        if key not in cache:
            cache[key] = read_trace(traces_dir / KINETO[key])
        return cache[key]

    return load
