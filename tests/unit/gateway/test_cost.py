"""Reading a request's predicted cost from its body."""

from __future__ import annotations

from latscope.load.cost import estimated_tokens, header_cost, priority_of, read_prompt


def test_completion_text_prompt_and_max_tokens():
    p = read_prompt({"prompt": "x" * 40, "max_tokens": 64})
    assert (p.text, p.token_ids, p.max_tokens) == ("x" * 40, 0, 64)
    assert estimated_tokens(p.text) == 10


def test_token_id_prompts_are_counted_exactly():
    assert read_prompt({"prompt": [1, 2, 3], "max_tokens": 1}).token_ids == 3
    batch = read_prompt({"prompt": [[1, 2], [3, 4, 5]], "max_tokens": 1})
    assert (batch.text, batch.token_ids) == (None, 5)


def test_chat_messages_join_text_parts():
    body = {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "hello"}]}],
            "max_completion_tokens": 7}
    p = read_prompt(body)
    assert p.text == "be brief\nhello"
    assert p.max_tokens == 7


def test_missing_or_bad_max_tokens_takes_the_default():
    assert read_prompt({"prompt": "a"}, default_max_tokens=99).max_tokens == 99
    assert read_prompt({"prompt": "a", "max_tokens": "many"}, 50).max_tokens == 50


def test_header_cost_overrides_only_with_a_sane_number():
    assert header_cost({"x-latscope-cost": "1500"}) == 1500.0
    assert header_cost({"x-latscope-cost": "-1"}) is None
    assert header_cost({"x-latscope-cost": "inf"}) is None
    assert header_cost({"x-latscope-cost": "lots"}) is None
    assert header_cost({}) is None


def test_priority_buckets_put_short_before_long():
    assert priority_of(160) < priority_of(1152) < priority_of(100_000)
    assert priority_of(0) == 0
