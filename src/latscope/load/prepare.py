"""Everything a run needs before its first request: the model, a tokenizer, request bodies.

All of it happens before measuring starts, so none of its CPU time lands in a latency. Setup HTTP
calls (``/v1/models``, ``/tokenize``) use the standard library synchronously; they run in a worker
thread from the runner.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

import orjson

from latscope.errors import TargetError
from latscope.load.config import BenchConfig
from latscope.load.rundir import host_info
from latscope.load.workload import (LocalTokenizer, Prompt, ServerTokenizer, Tokenizer,
                                    WordTokenizer, Workload)

_DURATION_POOL = 4096  # distinct prompts prepared for a closed-loop --duration run (then reused)


def base_url_of(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def discover_model(base_url: str, headers: dict[str, str]) -> str:
    """The first model the server lists; a clear TargetError when the server is not there."""
    req = urllib.request.Request(base_url + "/v1/models", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise TargetError(f"{base_url}/v1/models answered HTTP {exc.code}; "
                          "pass --model to skip model discovery") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TargetError(f"cannot reach {base_url}: {reason}") from None
    except ValueError:
        raise TargetError(f"{base_url}/v1/models did not return JSON") from None
    models = data.get("data") or []
    if not models:
        raise TargetError(f"{base_url}/v1/models lists no model; pass --model")
    return str(models[0]["id"])


def pick_tokenizer(config: BenchConfig, base_url: str, model: str,
                   headers: dict[str, str]) -> Tokenizer:
    if config.tokenizer:
        return LocalTokenizer(config.tokenizer)
    server = ServerTokenizer(base_url, model, headers)
    return server if server.works() else WordTokenizer()


def request_body(config: BenchConfig, model: str, prompt: Prompt) -> bytes:
    body: dict[str, Any] = {"model": model, "max_tokens": prompt.output_tokens,
                            "stream": config.stream}
    if config.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    if config.stream:
        # Final usage gives the exact output count; per-chunk usage (vLLM's continuous usage
        # stats) costs server and client work on every chunk, so it is opt-in.
        body["stream_options"] = {"include_usage": True}
        if config.per_chunk_usage:
            body["stream_options"]["continuous_usage_stats"] = True
    if config.workload.ignore_eos:
        body["ignore_eos"] = True
    body.update(config.extra_body)
    return orjson.dumps(body)


def prompt_count(config: BenchConfig) -> int:
    if config.num_requests:
        return config.num_requests + config.warmup
    assert config.duration_s
    if config.rate:
        return int(config.rate * config.duration_s * 1.5) + 16 + config.warmup
    return _DURATION_POOL + config.warmup


def make_manifest(config: BenchConfig, base_url: str, model: str, workload: Workload,
              tag: str) -> dict[str, Any]:
    import latscope

    versions = {"latscope": latscope.__version__}
    with contextlib.suppress(ImportError):
        import uvloop
        versions["uvloop"] = uvloop.__version__
    return {"kind": "bench", "run_tag": tag, "config": config.public_dict(), "base_url": base_url,
            "model": model, "endpoint": config.endpoint, "versions": versions, "host": host_info(),
            "workload": {"tokenizer": workload.tokenizer, "exact_lengths": workload.exact,
                         "notes": workload.notes,
                         "groups": dict(Counter(p.group for p in workload.prompts))},
            "created_wall": time.time(), "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)"}
