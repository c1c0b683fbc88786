"""Everything a run needs before its first request: the model, a tokenizer, request bodies.

All of it happens before measuring starts, so none of its CPU time lands in a latency. Setup HTTP
calls (``/v1/models``, ``/tokenize``) use the standard library synchronously; they run in a worker
thread from the runner.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import orjson

from latscope.errors import ConfigError, TargetError
from latscope.load.config import BenchConfig, LengthDist
from latscope.load.workload import LocalTokenizer, Prompt, ServerTokenizer, Tokenizer, WordTokenizer, Workload
from latscope.rundir import host_info

# a closed-loop --duration run's prompts built before it (the rest as it goes; with the server's
# /tokenize, the whole pool, then resent)
_DURATION_POOL = 4096
# Longest prompt built when the server does not state its context length: beyond any served
# model's, and already ~1 GB and minutes of tokenizer time (100M tokens once took 10 GB).
_MAX_PROMPT_TOKENS = 10_000_000


def base_url_of(url: str) -> str:
    return split_url(url)[0]


def split_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """(base URL without ``user:password@`` and without a trailing ``/v1``, the credentials).

    The credentials never go into a message, a log or the run directory: only the base URL
    does; they are sent as HTTP Basic auth (``request_headers``)."""
    parts = urlsplit(url.rstrip("/"))
    credentials = None
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        credentials = (unquote(user), unquote(password))
    base = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return (base[:-3] if base.endswith("/v1") else base), credentials


def request_headers(api_key: str | None, credentials: tuple[str, str] | None) -> dict[str, str]:
    """The auth header: a bearer API key, or the URL's user:password as Basic auth."""
    if api_key and credentials:
        raise ConfigError("the URL has a user:password and --api-key is set too: give one of "
                          "them (the URL's is sent as Basic auth, the key as a bearer token)")
    if api_key:
        return {"authorization": f"Bearer {api_key}"}
    if credentials:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        return {"authorization": f"Basic {token}"}
    return {}


def _get_json(base_url: str, path: str, headers: dict[str, str]) -> Any:
    req = urllib.request.Request(base_url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise TargetError(f"{base_url}{path} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TargetError(f"cannot reach {base_url}: {reason}") from None
    except http.client.HTTPException as exc:  # LineTooLong, BadStatusLine, IncompleteRead
        raise TargetError(f"{base_url}{path}: not a valid HTTP response "
                          f"({type(exc).__name__}: {str(exc)[:80]})") from None
    except ValueError:
        raise TargetError(f"{base_url}{path} did not return JSON") from None


def discover_model(base_url: str, headers: dict[str, str]) -> str:
    """The first model the server lists; a clear TargetError when the server is not there."""
    try:
        data = _get_json(base_url, "/v1/models", headers)
    except TargetError as exc:
        if "answered HTTP" in str(exc):
            raise TargetError(f"{exc}; pass --model to skip model discovery") from None
        raise
    models = data.get("data") if isinstance(data, dict) else None
    if not models or not isinstance(models, list):
        raise TargetError(f"{base_url}/v1/models lists no model; pass --model")
    first = models[0]
    if not isinstance(first, dict) or "id" not in first:
        raise TargetError(f"{base_url}/v1/models: a model entry without an id; pass --model")
    return str(first["id"])


def _max_model_len(base_url: str, headers: dict[str, str]) -> int | None:
    """The context length the server states (vLLM: ``max_model_len`` in /v1/models)."""
    try:
        data = _get_json(base_url, "/v1/models", headers)
        value = data["data"][0]["max_model_len"]
        return int(value) if value else None
    except (TargetError, KeyError, IndexError, TypeError, ValueError):
        return None


def _longest(dist: LengthDist) -> int:
    if dist.kind == "fixed":
        return int(dist.a)
    if dist.kind == "uniform":
        return int(dist.b)
    return int(dist.a + 6 * dist.b)  # a normal length is clipped only at 1: take mean + 6 sd


def check_lengths(config: BenchConfig, base_url: str, headers: dict[str, str]) -> None:
    """Refuses prompts longer than the model's context (or, unknown, than _MAX_PROMPT_TOKENS)
    before any is built: building them would take minutes and gigabytes for nothing."""
    spec = config.workload
    if spec.dataset:
        return
    inputs = [m.input_len for m in spec.mix] or [LengthDist.parse(spec.input_len)]
    longest = max([_longest(d) for d in inputs] + [spec.prefix_len])
    if longest <= 4096:
        return  # every served model takes that: skip the extra request
    limit = _max_model_len(base_url, headers)
    if limit is not None:
        if longest > limit:
            raise ConfigError(f"input length up to {longest} tokens, but the model's context "
                              f"(max_model_len) is {limit}")
        return
    if longest > _MAX_PROMPT_TOKENS:
        raise ConfigError(f"input length up to {longest} tokens: more than latscope builds "
                          f"({_MAX_PROMPT_TOKENS:,}) when the server states no context length")


# compared token for token between the server's /tokenize and a local tokenizer before the
# local one is trusted with the server's counts
_PROBE_TEXT = ("The quick brown fox, 42 times: naïve café costs $3.50 — why?\n"
               "def f(x): return x ** 2  # 東京")


def pick_tokenizer(config: BenchConfig, base_url: str, model: str,
                   headers: dict[str, str]) -> Tokenizer:
    """``--tokenizer``; else the server's model folder read here when this host has it and it
    tokenizes as the server does (a local target, or a server on this host); else the server's
    /tokenize; else one word as one token. Building a prompt takes two tokenizer calls or more:
    through vLLM's /tokenize on the H200 host 4,400 prompts took 11,097 calls and up to 36 s
    before the run (~8 ms a prompt), with the same tokenizer read here ~2 ms a prompt."""
    if config.tokenizer:
        return LocalTokenizer(config.tokenizer)
    server = ServerTokenizer(base_url, model, headers)
    if not server.works():
        return WordTokenizer(server.problem)
    local = _server_model_tokenizer(base_url, headers, server)
    return local or server


def _server_model_tokenizer(base_url: str, headers: dict[str, str],
                            server: ServerTokenizer) -> LocalTokenizer | None:
    """The tokenizer of the folder /v1/models names as the model's root, when it is on this
    host and encodes a probe exactly as the server's /tokenize does (same path, other host,
    other model: refused by the probe)."""
    try:
        root = _get_json(base_url, "/v1/models", headers)["data"][0]["root"]
        folder = Path(str(root))
        if not (folder / "tokenizer.json").is_file():
            return None
        local = LocalTokenizer(folder)
        same = local.encode(_PROBE_TEXT) == server.encode(_PROBE_TEXT)
    except (TargetError, ConfigError, KeyError, IndexError, TypeError, OSError):
        return None
    finally:
        server.close()
    if not same:
        return None
    local.source = f"local:{folder / 'tokenizer.json'} (the server's model; matches its /tokenize)"
    return local


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
    if config.priority_by == "cost":  # built once per prompt, before the run: off the send path
        from latscope.load.cost import priority_of

        body["priority"] = priority_of((prompt.prompt_tokens or 0) + prompt.output_tokens)
    body.update(config.extra_body)
    return orjson.dumps(body)


def ramp_allowance(concurrency: int | None) -> int:
    """Prompts built beyond a closed loop's measured ones for its stagger's ramp: the sends
    before every slot has sent (``load.stagger``), about one a slot; more are built as sent."""
    c = concurrency or 1
    return c + c // 4 + 4


def prompt_count(config: BenchConfig) -> int:
    if config.num_requests:
        ramp = ramp_allowance(config.concurrency) if config.rate is None and config.stagger \
            else 0
        return config.num_requests + max(config.warmup, ramp)
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
                         "notes": workload.notes + workload.prompts.notes(),
                         # by group where every prompt was built before the run, else None
                         "groups": workload.prompts.groups_built(),
                         "prompts": workload.prompts.figures()},
            "created_wall": time.time(), "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)"}
