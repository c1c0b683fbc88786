"""Gathering what a server says about its configuration: ``/version``, ``/v1/models``,
``/metrics`` (``cache_config_info``), the startup log (via ``latscope.server.logs.parse_log``) and
the server process's own command line; plus finding the pid that listens on a local URL's port.

Each setting is kept with its source (``log:LINE``, ``/proc/PID/cmdline``, ``URL/metrics``) so the
checks in ``latscope.findings.serverconfig`` can cite it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import urlsplit

from latscope.env.facts import ServerFacts

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
# vLLM CLI flags doctor judges: flag -> (setting, value when given without an argument)
_FLAGS: dict[str, tuple[str, Any]] = {
    "--enable-log-requests": ("request_logging", True),
    "--enforce-eager": ("enforce_eager", True),
    "--disable-log-stats": ("disable_log_stats", True),
    "--no-enable-chunked-prefill": ("chunked_prefill", False),
    "--enable-chunked-prefill": ("chunked_prefill", True),
    "--async-scheduling": ("async_scheduling", True),
    "--tensor-parallel-size": ("tensor_parallel_size", None),
    "-tp": ("tensor_parallel_size", None),
    "--max-log-len": ("max_log_len", None),
    "--max-num-seqs": ("max_num_seqs", None),
    "--max-num-batched-tokens": ("max_num_batched_tokens", None),
    "--scheduling-policy": ("scheduling_policy", None),
    "--profiler-config": ("profiler_config", None),
}
LOG_SETTINGS = ("version", "enforce_eager", "cudagraph_mode", "chunked_prefill", "request_logging",
                "log_level", "tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens",
                "max_concurrency", "kv_device", "profiler_enabled", "async_scheduling")


def base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOCAL_HOSTS


def settings_from_cmdline(argv: list[str], source: str) -> dict[str, tuple[Any, str]]:
    settings: dict[str, tuple[Any, str]] = {}
    for i, arg in enumerate(argv):
        flag, eq, inline = arg.partition("=")
        if flag not in _FLAGS:
            continue
        key, implied = _FLAGS[flag]
        value = inline if eq else implied
        if value is None and i + 1 < len(argv):
            value = argv[i + 1]
        if isinstance(value, str) and re.fullmatch(r"\d+", value):
            value = int(value)
        settings[key] = (value, source)
    return settings


def settings_from_log(server_log: Any) -> dict[str, tuple[Any, str]]:
    config = server_log.config
    return {key: (config[key], server_log.source(key)) for key in LOG_SETTINGS
            if config.get(key) is not None}


async def _get(session: Any, url: str) -> tuple[int, str]:
    # no redirects: doctor talks to the given server only (a 3xx is reported as its status)
    async with session.get(url, allow_redirects=False) as resp:
        return resp.status, await resp.text()


async def fetch_endpoints(url: str, headers: dict[str, str], timeout_s: float = 10.0
                          ) -> dict[str, tuple[int, str] | str]:
    """GET /version, /v1/models and /metrics: path -> (status, body), or the error text."""
    import aiohttp

    out: dict[str, tuple[int, str] | str] = {}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        for path in ("/version", "/v1/models", "/metrics"):
            try:
                out[path] = await _get(session, base_url(url) + path)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                out[path] = f"{type(exc).__name__}: {exc}" or type(exc).__name__
    return out


def gather_server_facts(url: str | None, log: str | None, headers: dict[str, str]) -> ServerFacts:
    import orjson

    from latscope.redact import redact_url_password

    # facts.url is printed and written to --json: never with a user:password@ in it
    facts = ServerFacts(url=url and redact_url_password(url), log_path=log)
    if log:
        from latscope.server.logs import parse_log
        try:
            server_log = parse_log(log)
        except OSError as exc:
            from latscope.errors import ConfigError
            raise ConfigError(f"--log {log}: {exc.strerror or exc}") from exc
        facts.log_config = server_log
        facts.settings.update(settings_from_log(server_log))
        if server_log.config.get("version"):
            facts.version = server_log.config["version"]
            facts.version_source = server_log.source("version")
    if not url:
        return facts
    results = asyncio.run(fetch_endpoints(url, headers))
    facts.endpoints = {k: (v[0] if isinstance(v, tuple) else v) for k, v in results.items()}
    version = results.get("/version")
    if isinstance(version, tuple) and version[0] == 200:
        try:
            facts.version = str(orjson.loads(version[1]).get("version"))
            facts.version_source = base_url(url) + "/version"
        except (orjson.JSONDecodeError, AttributeError):
            pass
    models = results.get("/v1/models")
    if isinstance(models, tuple) and models[0] == 200:
        try:
            facts.models = list(orjson.loads(models[1]).get("data", []))
        except (orjson.JSONDecodeError, AttributeError):
            pass
    metrics = results.get("/metrics")
    if isinstance(metrics, tuple) and metrics[0] == 200:
        facts.metrics_text = metrics[1]
    else:
        facts.metrics_error = (metrics if isinstance(metrics, str) or metrics is None
                               else f"HTTP {metrics[0]}")
    return facts
