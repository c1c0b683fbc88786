"""A request's predicted cost: prompt tokens plus ``max_tokens``, read from its JSON body.

Prompt tokens come, best first, from the ``x-latscope-cost`` header (the whole cost, set by the
caller), a local tokenizer (``--tokenizer``), the upstream's ``POST /tokenize`` (vLLM; one round
trip, so the gateway asks only for requests that will wait anyway), or ``len(text) / 4`` (the
usual characters-per-token of English BPE tokenizers). Token-id prompts are counted exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

COST_HEADER = "x-latscope-cost"
CHARS_PER_TOKEN = 4.0
DEFAULT_MAX_TOKENS = 256  # when a request gives none (vLLM would fill the model length)


@dataclass(slots=True)
class Prompt:
    """What is known of a request's prompt without a tokenizer."""

    text: str | None  # the text to tokenize (None: token ids, already counted)
    token_ids: int  # tokens given as ids
    max_tokens: int


def read_prompt(body: dict[str, Any], default_max_tokens: int = DEFAULT_MAX_TOKENS) -> Prompt:
    """The prompt of a completions or chat body (chat: the messages' text contents joined)."""
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or default_max_tokens
    try:
        max_tokens = max(int(max_tokens), 0)
    except (TypeError, ValueError):
        max_tokens = default_max_tokens
    if "messages" in body:
        return Prompt(_messages_text(body.get("messages")), 0, max_tokens)
    texts, ids = _prompt_parts(body.get("prompt"))
    return Prompt("".join(texts) if texts else None, ids, max_tokens)


def _prompt_parts(prompt: Any) -> tuple[list[str], int]:
    if isinstance(prompt, str):
        return [prompt], 0
    if isinstance(prompt, list):
        if all(isinstance(x, int) for x in prompt):
            return [], len(prompt)
        texts, ids = [], 0
        for item in prompt:
            t, i = _prompt_parts(item)
            texts += t
            ids += i
        return texts, ids
    return [], 0


def _messages_text(messages: Any) -> str:
    parts = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            parts += [c.get("text", "") for c in content if isinstance(c, dict)]
    return "\n".join(parts)


def estimated_tokens(text: str | None) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def header_cost(headers: Any) -> float | None:
    """The caller's own cost from ``x-latscope-cost`` (None when absent or not a number >= 0)."""
    value = headers.get(COST_HEADER)
    if value is None:
        return None
    try:
        cost = float(value)
    except ValueError:
        return None
    return cost if cost >= 0 and math.isfinite(cost) else None


def priority_of(cost: float) -> int:
    """vLLM's ``priority`` (lower runs first) for a cost: its power-of-two bucket. Coarse on
    purpose: vLLM does not age priorities, so within a bucket it stays first come, first served."""
    return int(math.log2(cost + 1))
