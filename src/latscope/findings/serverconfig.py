"""Server-config checks (each id is documented in docs/findings.md): what the server's
endpoints, startup log and command line say about settings that cost latency. Logging checks
share their rule with the log reader (``latscope.findings.server``): one id, one wording.

Settings were gathered by ``latscope.env.serverfacts`` with their sources; a check whose input was
not available (no --url, no --log, no pid) says so as a skipped finding.
"""

from __future__ import annotations

import re
from typing import Any

from latscope.env.facts import Facts
from latscope.findings import reference as _ref
from latscope.findings import server as server_rules
from latscope.findings.checkbase import ev, skipped
from latscope.model import Finding, Severity

REF = "docs/findings.md"
VLLM_ENGINE_ARGS = "https://docs.vllm.ai/en/stable/configuration/engine_args/"
VLLM_OPTIMIZATION = "https://docs.vllm.ai/en/stable/configuration/optimization/"
VLLM_CUDA_GRAPHS = "https://docs.vllm.ai/en/stable/design/cuda_graphs/"
VLLM_PROFILING = "https://docs.vllm.ai/en/stable/contributing/profiling/"
VLLM_ENVS = "https://github.com/vllm-project/vllm/blob/main/vllm/envs.py"
AMD_VLLM_DOC = ("https://rocm.docs.amd.com/en/docs-7.2.0/how-to/rocm-for-ai/"
                "inference-optimization/vllm-optimization.html")


STALE_FROM_020 = ("VLLM_ATTENTION_BACKEND", "VLLM_TORCH_PROFILER_DIR")


def version_tuple(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _setting(facts: Facts, key: str) -> tuple[Any, str]:
    return facts.server.settings.get(key, (None, ""))


def _no_config(facts: Facts) -> bool:
    return not facts.server.settings and not facts.server.url


def check_reachable(facts: Facts) -> list[Finding]:
    s = facts.server
    if not s.url:
        return [skipped("server.endpoints", "no --url given", "config")]
    evidence = [ev(f"GET {path}", status, s.url) for path, status in s.endpoints.items()]
    if all(not isinstance(v, int) for v in s.endpoints.values()):
        return [Finding("server.endpoints", Severity.CRITICAL, f"server at {s.url} is unreachable",
                        evidence, fix="check the URL, and that the server is up (GET /health)",
                        reference=f"{REF}#server.endpoints", layer="network")]
    title = f"server answers (vLLM {s.version})" if s.version else "server answers (not vLLM: no /version)"
    evidence += [ev("model", m.get("id"), f"{s.url}/v1/models") for m in s.models[:4]]
    evidence += [ev(f"{m.get('id')} max_model_len", m["max_model_len"], f"{s.url}/v1/models")
                 for m in s.models[:4] if "max_model_len" in m]
    return [Finding("server.endpoints", Severity.INFO, title, evidence, layer="config")]


def _flag(facts: Facts, check_id: str, key: str, bad: Any, severity: Severity, title: str,
          why: str, fix: str, ref: str, ok_title: str, layer: str = "config") -> list[Finding]:
    value, source = _setting(facts, key)
    if value is None:
        return [skipped(check_id, f"{key} not known (give --log, or --pid/--url of a local server)",
                        layer)]
    evidence = [ev(key, value, source)]
    is_bad = bad(value) if callable(bad) else value == bad
    if not is_bad:
        return [Finding(check_id, Severity.OK, ok_title, evidence, layer=layer)]
    return [Finding(check_id, severity, title, evidence, why=why, fix=fix, reference=ref,
                    layer=layer)]


def check_eager_and_graphs(facts: Facts) -> list[Finding]:
    on_cpu = _setting(facts, "kv_device")[0] == "CPU"
    severity = Severity.INFO if on_cpu else Severity.WARNING
    eager = _flag(facts, "server.enforce_eager", "enforce_eager", True, severity,
                  "CUDA graphs disabled (--enforce-eager)" + (" on a CPU build" if on_cpu else ""),
                  "Every decode step launches each kernel from Python: launch overhead per token.",
                  "remove --enforce-eager", _ref("server.enforce_eager", VLLM_CUDA_GRAPHS),
                  "not in eager mode")
    if eager[0].severity not in (Severity.OK, Severity.SKIPPED):
        return eager
    version = version_tuple(facts.vllm_version()[0])
    graphs = _flag(facts, "server.cudagraph_mode", "cudagraph_mode",
                   lambda v: str(v).upper() in ("NONE", "PIECEWISE") and version is not None
                   and version >= (0, 11),
                   Severity.WARNING, "CUDA graphs not captured for full decode batches",
                   "With NONE/PIECEWISE, attention runs outside graphs: slower decode steps.",
                   "--compilation-config '{\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"}' (0.11+ default)",
                   _ref("server.cudagraph_mode", VLLM_CUDA_GRAPHS),
                   "CUDA-graph mode FULL_AND_PIECEWISE or FULL")
    return eager + graphs


def check_chunked_prefill(facts: Facts) -> list[Finding]:
    return _flag(facts, "server.chunked_prefill", "chunked_prefill", False, Severity.WARNING,
                 "chunked prefill is disabled",
                 "A long prompt's prefill then runs as one step and stalls every decode behind it.",
                 "--enable-chunked-prefill", _ref("server.chunked_prefill", VLLM_OPTIMIZATION),
                 "chunked prefill is on",
                 layer="prefill")


def check_request_logging(facts: Facts) -> list[Finding]:
    value, source = _setting(facts, "request_logging")
    if value is None:
        return [skipped("server.request_logging", "request_logging not known (give --log, or "
                        "--pid/--url of a local server)", "frontend")]
    evidence = [ev("request_logging", value, source)]
    if value is True:
        max_len = _setting(facts, "max_log_len")
        evidence.append(ev("max_log_len", max_len[0] if max_len[0] is not None
                           else "unlimited (not set)", max_len[1] or "vLLM default"))
    return [server_rules.request_logging_finding(evidence, flag=value is True,
                                                 logging_on=value is True)]


def check_log_level(facts: Facts) -> list[Finding]:
    value, source = _setting(facts, "log_level")
    if value is None:
        return [skipped("server.debug_logging", "log_level not known (give --log, or "
                        "--pid/--url of a local server)", "config")]
    return [server_rules.debug_logging_finding([ev("log_level", value, source)],
                                               debug=server_rules.is_debug_level(value))]


def check_profiler(facts: Facts) -> list[Finding]:
    value, source = _setting(facts, "profiler_enabled")
    env_dir = facts.env.get("VLLM_TORCH_PROFILER_DIR")
    evidence = []
    if value:
        evidence.append(ev("profiler enabled", True, source))
    config = _setting(facts, "profiler_config")
    if config[0]:
        evidence.append(ev("--profiler-config", config[0], config[1]))
    version = version_tuple(facts.vllm_version()[0])
    if env_dir and (version is None or version < (0, 20)):
        evidence.append(ev("VLLM_TORCH_PROFILER_DIR", env_dir, facts.env_source))
    if not evidence:
        if _no_config(facts):
            return [skipped("server.profiler", "no --log/--url/--pid to read", "config")]
        return [Finding("server.profiler", Severity.OK, "no profiler enabled",
                        [ev("VLLM_TORCH_PROFILER_DIR", env_dir or "(unset)", facts.env_source)],
                        layer="config")]
    return [Finding("server.profiler", Severity.WARNING, "the torch profiler is enabled", evidence,
                    why="vLLM warns it 'should ONLY be used for local development'; profiling hooks "
                        "and /start_profile can stall serving.",
                    fix="drop --profiler-config in production",
                    reference=_ref("server.profiler", VLLM_PROFILING),
                    layer="config")]


def check_stale_env(facts: Facts) -> list[Finding]:
    version_text, version_source = facts.vllm_version()
    version = version_tuple(version_text)
    log = facts.server.log_config
    unknown = list(log.config.get("unknown_env_vars") or []) if log is not None else []
    set_stale = [v for v in STALE_FROM_020 if v in facts.env]
    if version is None and not unknown:
        return [skipped("server.stale_env", "vLLM version unknown", "config")]
    evidence = [ev("vLLM version", version_text, version_source)] if version_text else []
    bad = [v for v in set_stale if version and version >= (0, 20)]
    evidence += [ev(v, facts.env[v], facts.env_source) for v in bad]
    evidence += [ev("log: Unknown vLLM environment variable", v, log.path) for v in unknown]
    if not bad and not unknown:
        return [Finding("server.stale_env", Severity.OK, "no stale vLLM environment variables",
                        evidence, layer="config")]
    return [Finding(
        "server.stale_env", Severity.WARNING,
        f"environment variables this vLLM ignores: {', '.join(sorted(set(bad + unknown)))}", evidence,
        why="They no longer do anything (0.20+ reads --attention-backend / --profiler-config), so "
            "the setting you think is active is not.",
        fix="use the CLI flag instead and unset the variable",
        reference=_ref("server.stale_env", VLLM_ENVS),
        layer="config")]


def check_log_warnings(facts: Facts) -> list[Finding]:
    log = facts.server.log_config
    if log is None:
        return [skipped("server.log_warnings", "no --log given", "config")]
    findings = []
    for w in log.warnings:
        if w["kind"] == "block_size_precluded_backend":
            findings.append(Finding(
                "server.block_size_backend", Severity.WARNING,
                "--block-size ruled out a faster attention backend",
                [ev("log warning", w["text"], f"{log.path}:{w['line']}")],
                fix="unset --block-size (AITER MLA: 1)",
                reference=_ref("server.block_size_backend", VLLM_ENGINE_ARGS)))
        elif w["kind"] == "async_scheduling_disabled":
            findings.append(Finding(
                "server.async_scheduling", Severity.INFO, "async scheduling is disabled",
                [ev("log warning", w["text"], f"{log.path}:{w['line']}")],
                why="The GPU waits for the scheduler between steps; AMD prefers it off for TTFT.",
                fix="fix the cause the warning names, then measure both",
                reference=_ref("server.async_scheduling", AMD_VLLM_DOC)))
    return findings


def check_kv_capacity(facts: Facts) -> list[Finding]:
    conc, conc_src = _setting(facts, "max_concurrency")
    seqs, seqs_src = _setting(facts, "max_num_seqs")
    if conc is None:
        return [skipped("server.kv_capacity", "no 'Maximum concurrency' line (give --log)", "queue")]
    evidence = [ev("Maximum concurrency (full-length requests)", conc, conc_src, "x")]
    if seqs is not None:
        evidence.append(ev("max_num_seqs", seqs, seqs_src))
    if seqs is not None and float(conc) < float(seqs):
        return [Finding(
            "server.kv_capacity", Severity.INFO,
            f"KV cache fits {float(conc):g} max-length requests, fewer than max_num_seqs={seqs}",
            evidence, why="Near that concurrency with long requests, requests wait or are preempted.",
            fix="if your target concurrency is above it: more KV memory, FP8 KV, or TP",
            reference=_ref("server.kv_capacity", VLLM_OPTIMIZATION), layer="queue")]
    return [Finding("server.kv_capacity", Severity.OK, "KV cache capacity reported", evidence,
                    layer="queue")]


SERVER_CHECKS = (check_reachable, check_eager_and_graphs, check_chunked_prefill,
                 check_request_logging, check_log_level, check_profiler, check_stale_env,
                 check_log_warnings, check_kv_capacity)
