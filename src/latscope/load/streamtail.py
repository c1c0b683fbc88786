"""What the end of a finished response says about its request: tokens (the server's usage, or
the chunks counted) and vLLM's per-request metrics. Shared by every stream reader in
``latscope.load.response`` and ``latscope.load.fastread``."""

from __future__ import annotations

import re

import orjson

from latscope.model import RequestRecord

_INT = re.compile(rb'\s*:\s*(\d+)')


def keep_server_metrics(record: RequestRecord, body: bytes) -> None:
    """vLLM's per-request timings (``--enable-per-request-metrics``) ride in the last usage event
    as ``"metrics": {...}``; decode that one event only, once per request, after it ended."""
    at = body.rfind(b'"metrics"')
    if at < 0:
        return
    start = body.rfind(b"data:", 0, at)
    end = body.find(b"\n\n", at)
    try:
        data = orjson.loads(body[start + 5:end if end >= 0 else len(body)].strip())
    except orjson.JSONDecodeError:
        return  # "metrics" was part of the generated text, not a field
    if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
        record.server["metrics"] = data["metrics"]


def last_int(text: bytes, key: bytes) -> int | None:
    """The integer after the last ``key`` in ``text`` (a usage count in a response's tail)."""
    at = text.rfind(key)
    if at < 0:
        return None
    m = _INT.match(text, at + len(key))
    return int(m[1]) if m else None


def set_tokens(record: RequestRecord, completion: int | None, prompt: int | None,
                counted: int | None) -> None:
    if completion is not None:
        record.output_tokens, record.output_tokens_source = int(completion), "usage"
    elif counted is not None:
        record.output_tokens, record.output_tokens_source = counted, "counted"
    if prompt is not None:
        record.prompt_tokens = int(prompt)
