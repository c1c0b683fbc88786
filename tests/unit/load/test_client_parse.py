"""The client's response reading: HTTP de-chunking and SSE, fed bytes split at awkward places.

Every test here runs twice, once per quick pass (the C one and its pure-Python twin, which
``latscope.native`` takes where no compiler is found): each must agree with the exact reader or
decline."""

from __future__ import annotations

import asyncio

import pytest

from latscope import native
from latscope.load import response
from latscope.load.client import _Exchange
from latscope.load.response import finalize
from latscope.model import RequestRecord


@pytest.fixture(autouse=True, params=["c", "python"])
def quick_reader(request, monkeypatch):
    """The backend whose quick pass ``finalize`` (and ``_both_readers``) takes first."""
    if request.param not in native.BACKENDS:
        pytest.skip("the C part is not built (tests/unit/test_native.py says why)")
    monkeypatch.setattr(response, "scan_stream", native.BACKENDS[request.param].scan_stream)
    return request.param


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def run_exchange(reads: list[bytes], stream: bool = True) -> tuple[RequestRecord, _Exchange]:
    loop = asyncio.new_event_loop()
    try:
        ex = _Exchange(loop.create_future())
        for t, data in enumerate(reads, start=1):
            ex.feed(t * 1000, data)
        record = RequestRecord(index=0, request_id="x", scheduled_ns=0)
        if not ex.future.done():
            ex.fail(type("K", (), {"value": "connection"})(), "no end")  # type: ignore[arg-type]
        finalize(record, ex, stream)
        return record, ex
    finally:
        loop.close()


CHAT = [
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":" there"}}]}\n\n',
    b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}\n\n',
    b"data: [DONE]\n\n",
]


def test_chat_stream_one_read_per_event():
    reads = [HEAD] + [chunk(e) for e in CHAT] + [b"0\r\n\r\n"]
    record, ex = run_exchange(reads)
    assert record.ok, record.error
    # the role-only first chunk has no content: TTFT is at the first real text (read 3)
    assert record.first_token_ns == 3000 and record.chunk_ns == [3000, 4000]
    assert (record.output_tokens, record.output_tokens_source) == (2, "usage")
    assert record.prompt_tokens == 7 and record.headers_ns == 1000 and record.end_ns == 7000


def test_events_and_chunks_split_across_reads():
    body = b"".join(chunk(e) for e in CHAT) + b"0\r\n\r\n"
    # cut inside the chunk size line of event 2, and inside the "\n\n" of event 3
    cut1 = body.index(b"\r\n", len(chunk(CHAT[0]))) - 1
    third_end = len(chunk(CHAT[0])) + len(chunk(CHAT[1])) + len(chunk(CHAT[2])) - 3
    reads = [HEAD, body[:cut1], body[cut1:third_end], body[third_end:-2], body[-2:]]
    record, _ = run_exchange(reads)
    assert record.ok, record.error
    # event 2 completes in read 3, event 3 (its last "\n" in read 4) in read 4
    assert record.chunk_ns == [3000, 4000]
    assert record.end_ns == 5000


def test_completions_stream_counts_chunks_without_usage_and_crlf_events():
    events = [b'data: {"choices":[{"text":"a"}]}\r\n\r\n', b'data: {"choices":[{"text":"b"}]}\r\n\r\n',
              b"data: [DONE]\r\n\r\n"]
    record, _ = run_exchange([HEAD + b"".join(chunk(e) for e in events) + b"0\r\n\r\n"])
    assert record.ok, record.error
    assert (record.output_tokens, record.output_tokens_source) == (2, "counted")
    assert record.chunk_ns == [1000, 1000]


def test_continuous_usage_gives_tokens_per_chunk():
    events = [b'data: {"choices":[{"text":"a"}],"usage":{"completion_tokens":1}}\n\n',
              b'data: {"choices":[{"text":"bcd"}],"usage":{"completion_tokens":4}}\n\n',
              b"data: [DONE]\n\n"]
    record, _ = run_exchange([HEAD] + [chunk(e) for e in events] + [b"0\r\n\r\n"])
    assert record.chunk_tokens == [1, 3] and record.output_tokens == 4


@pytest.mark.parametrize("events,kind", [
    ([b"data: {oops\n\n", b"data: [DONE]\n\n"], "malformed_response"),
    ([b'data: {"choices":[{"text":"a"}]}\n\n'], "malformed_response"),  # no [DONE]
    ([b'data: {"error":{"message":"boom"}}\n\n', b"data: [DONE]\n\n"], "malformed_response"),
])
def test_bad_streams_are_failures(events, kind):
    record, _ = run_exchange([HEAD] + [chunk(e) for e in events] + [b"0\r\n\r\n"])
    assert record.error_kind == kind and not record.ok


def test_http_error_status_and_body():
    body = b'{"error":"overloaded"}'
    reads = [b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: %d\r\n\r\n" % len(body), body]
    record, ex = run_exchange(reads)
    assert record.error_kind == "http_5xx" and "overloaded" in record.error
    assert record.status == 503 and ex.keep_alive


def test_non_streaming_json_with_usage():
    body = b'{"id":"cmpl-1","choices":[{"text":"hello"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}'
    record, _ = run_exchange([b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body),
                              body[:10], body[10:]], stream=False)
    assert record.ok and record.output_tokens == 5 and record.first_token_ns is None
    assert record.end_ns == 3000


def _both_readers(reads: list[tuple[int, bytes]]):
    from latscope.load.response import _read_stream, dechunk

    fast = RequestRecord(index=0, request_id="f", scheduled_ns=0)
    took_fast = response.read_stream_quick(fast, reads)
    exact = RequestRecord(index=0, request_id="e", scheduled_ns=0)
    problem = _read_stream(exact, dechunk(reads))
    return took_fast, fast, exact, problem


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("step", [7, 61, 150, 4096])
def test_fast_reader_agrees_with_exact_reader_at_any_split(chat, step):
    import fakeserver

    events = list(fakeserver._events(chat, 40, 11, True, False))
    if chat:  # vLLM's first chat chunk: role only, empty content
        events.insert(0, b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n')
    body = b"".join(chunk(e) for e in events) + b"0\r\n\r\n"
    reads = [(i, body[i:i + step]) for i in range(0, len(body), step)]
    took_fast, fast, exact, problem = _both_readers(reads)
    assert problem is None and len(exact.chunk_ns) == 40
    if took_fast:
        assert (fast.chunk_ns, fast.output_tokens, fast.prompt_tokens) == (
            exact.chunk_ns, exact.output_tokens, exact.prompt_tokens)
    # one event per read, as servers stream: the fast path must be the one taken
    if step == 4096:
        assert took_fast


def test_fast_reader_declines_what_it_cannot_prove(quick_reader):
    spaced = [b'data: {"choices": [{"text": "a"}]}\n\n', b"data: [DONE]\n\n"]
    per_chunk = [b'data: {"choices":[{"text":"a"}],"usage":{"completion_tokens":1}}\n\n',
                 b'data: {"choices":[{"text":"b"}],"usage":{"completion_tokens":2}}\n\n',
                 b"data: [DONE]\n\n"]
    split_event = [b'data: {"choices":[{"te', b'xt":"a"}]}\n\n', b"data: [DONE]\n\n"]
    # the C pass reads JSON spacing and an event split over chunks as the exact reader does;
    # neither quick reader takes usage per chunk (the exact reader counts tokens per chunk)
    c_takes = {id(spaced), id(split_event)} if quick_reader == "c" else set()
    for events in (spaced, per_chunk, split_event):
        body = b"".join(chunk(e) for e in events) + b"0\r\n\r\n"
        took_fast, fast, exact, problem = _both_readers([(1, body)])
        assert problem is None and exact.chunk_ns == [1] * (
            len(events) - 1 if events is not split_event else 1)
        assert took_fast == (id(events) in c_takes)
        if took_fast:
            assert (fast.chunk_ns, fast.output_tokens) == (exact.chunk_ns, exact.output_tokens)


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("step", [9, 4096])
def test_token_events_with_empty_text_count_and_role_chunk_does_not(chat, step):
    # vLLM streams one event per token even when the token does not decode to whole characters
    # yet (text ""): those events are tokens; a chat role announcement is not.
    def ev(text: str) -> bytes:
        body = ('{"choices":[{"delta":{"content":"%s"}}]}' if chat
                else '{"choices":[{"text":"%s"}]}') % text
        return b"data: " + body.encode() + b"\n\n"

    events = [ev(""), ev(""), ev("\\u4f60"), ev("a")]
    if chat:
        events.insert(0, b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n')
    events += [b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n',
               b"data: [DONE]\n\n"]
    body = b"".join(chunk(e) for e in events) + b"0\r\n\r\n"
    first = 1 if chat else 0
    # one read per event, each at a distinct time, so first_token_ns tells which event it was
    reads, t = [], 100
    for e in events:
        reads.append((t, chunk(e)))
        t += 100
    reads[-1] = (reads[-1][0], reads[-1][1] + b"0\r\n\r\n")
    if step != 4096:  # awkward splits instead
        reads = [(i, body[i:i + step]) for i in range(0, len(body), step)]
    took_fast, fast, exact, problem = _both_readers(reads)
    assert problem is None and len(exact.chunk_ns) == 4 and exact.output_tokens == 4
    if step == 4096:
        assert exact.first_token_ns == 100 + 100 * first  # the first empty-text token event
        assert took_fast
    if took_fast:
        assert fast.chunk_ns == exact.chunk_ns


def test_per_request_server_metrics_are_kept_from_the_last_usage_event():
    # shape of vLLM 0.32 with --enable-per-request-metrics (final usage chunk of a stream)
    metrics = b'{"queue_time_ms":1.5,"time_to_first_token_ms":20.0,"generation_time_ms":80.0}'
    events = [b'data: {"choices":[{"text":"a"}]}\n\n', b'data: {"choices":[{"text":"b"}]}\n\n',
              b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2},'
              b'"metrics":' + metrics + b'}\n\n', b"data: [DONE]\n\n"]
    body = b"".join(chunk(e) for e in events) + b"0\r\n\r\n"
    for reads in ([(1, body)], [(i, body[i:i + 13]) for i in range(0, len(body), 13)]):
        took_fast, fast, exact, problem = _both_readers(reads)
        assert problem is None
        assert exact.server["metrics"]["time_to_first_token_ms"] == 20.0
        if took_fast:
            assert fast.server["metrics"] == exact.server["metrics"]
    # metrics in an event before the last three (not vLLM's place): both readers leave them
    early = [events[0], b'data: {"choices":[{"text":"x"}],"metrics":' + metrics + b'}\n\n']
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}\n\n'
    body = b"".join(chunk(e) for e in early + events[:2] + [usage, events[3]]) + b"0\r\n\r\n"
    took_fast, fast, exact, problem = _both_readers([(1, body)])
    assert problem is None and took_fast and "metrics" not in exact.server
    assert "metrics" not in fast.server and fast.chunk_ns == exact.chunk_ns == [1] * 4
    body = b'{"choices":[{"text":"ab"}],"usage":{"completion_tokens":2},"metrics":' + metrics + b"}"
    record, _ = run_exchange([b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body), body],
                             stream=False)
    assert record.server["metrics"]["queue_time_ms"] == 1.5


def _vllm_events(chat: bool, n: int, text=lambda i: f" w{i}") -> list[bytes]:
    """vLLM's OpenAI server's streamed events (field order, compact JSON), role event first in chat."""
    head = ('"id":"cmpl-1","object":"%s","created":1733140000,"model":"m"'
            % ("chat.completion.chunk" if chat else "text_completion"))
    out = [b'data: {%s,"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
           b'"logprobs":null,"finish_reason":null}]}\n\n' % head.encode()] if chat else []
    for i in range(n):
        value = (('"delta":{"content":"%s"}' if chat else '"text":"%s"') % text(i)).encode()
        out.append(b'data: {%s,"choices":[{"index":0,%s,"logprobs":null,"finish_reason":null}]}'
                   b"\n\n" % (head.encode(), value))
    out.append(b'data: {%s,"choices":[],"usage":{"prompt_tokens":5,"total_tokens":%d,'
               b'"completion_tokens":%d}}\n\n' % (head.encode(), n + 5, n))
    return out + [b"data: [DONE]\n\n"]


def _per_event_reads(events: list[bytes]) -> list[tuple[int, bytes]]:
    reads = [(100 * (i + 1), chunk(e)) for i, e in enumerate(events)]
    return reads[:-1] + [(reads[-1][0], reads[-1][1] + b"0\r\n\r\n")]


@pytest.mark.parametrize("chat", [False, True])
def test_fast_reader_times_each_token_by_its_own_read(chat):
    # one read per event, as a server flushing every token is read: each token keeps its read's
    # time (the role event, read 1 in chat, is no token)
    reads = _per_event_reads(_vllm_events(chat, 300))
    took_fast, fast, exact, problem = _both_readers(reads)
    assert took_fast and problem is None
    first = 200 if chat else 100
    assert fast.chunk_ns == exact.chunk_ns == list(range(first, first + 300 * 100, 100))
    assert (fast.output_tokens, fast.prompt_tokens) == (exact.output_tokens, 5) == (300, 5)


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("one_read", [False, True])
def test_error_event_after_many_tokens_fails_the_request(chat, one_read):
    events = _vllm_events(chat, 250)
    events.insert(-2, b'data: {"error":{"object":"error","message":"engine died","code":500}}\n\n')
    reads = _per_event_reads(events)
    if one_read:
        reads = [(1, b"".join(d for _, d in reads))]
    took_fast, _, _, problem = _both_readers(reads)
    assert not took_fast and "engine died" in problem
    record, _ = run_exchange([HEAD + b"".join(d for _, d in reads)])
    assert record.error_kind == "malformed_response" and "engine died" in record.error


@pytest.mark.parametrize("word", ['\\"error', '\\"role', 'reasoning', '\\"reasoning'])
def test_key_names_inside_generated_text_are_tokens_to_both_readers(word):
    # generated text holding a key's name (quotes escaped in JSON) is a token, never an error
    # event or a role: whichever reader runs, the tokens are the same
    events = _vllm_events(True, 40, text=lambda i: word if i % 7 == 3 else "x")
    took_fast, fast, exact, problem = _both_readers(_per_event_reads(events))
    assert problem is None and len(exact.chunk_ns) == 40
    if took_fast:
        assert fast.chunk_ns == exact.chunk_ns


def test_reads_cut_mid_event_after_whole_ones_keep_each_token_time():
    # most reads end with their event, a few do not: the per-read loop takes over, same times
    events = _vllm_events(False, 30)
    reads = _per_event_reads(events)
    ns, data = reads[10]
    reads[10:11] = [(ns - 50, data[:40]), (ns, data[40:])]
    took_fast, fast, exact, problem = _both_readers(reads)
    assert took_fast and problem is None
    assert fast.chunk_ns == exact.chunk_ns and len(fast.chunk_ns) == 30


@pytest.mark.parametrize("error_at", [None, 5, 30])
def test_reasoning_stream_reads_fast_and_still_fails_on_a_late_error(error_at):
    # a reasoning model's chat stream: reasoning_content tokens, then content tokens
    events = _vllm_events(True, 40)
    for i in range(1, 21):
        events[i] = events[i].replace(b'"content":"', b'"reasoning_content":"')
    if error_at is not None:
        events.insert(error_at, b'data: {"error":{"message":"engine died","code":500}}\n\n')
    took_fast, fast, exact, problem = _both_readers(_per_event_reads(events))
    if error_at is None:
        assert took_fast and problem is None and len(exact.chunk_ns) == 40
        assert fast.chunk_ns == exact.chunk_ns
    else:
        assert not took_fast and "engine died" in problem


def _body(chunks: list[bytes]) -> bytes:
    return b"".join(chunk(c) for c in chunks) + b"0\r\n\r\n"


def _tokens(n: int) -> list[bytes]:
    return [b'data: {"choices":[{"text":"t%d"}]}\n\n' % i for i in range(n)]


@pytest.mark.parametrize("shape", ["one_per_chunk", "last_chunk_holds_three", "coalesced",
                                   "all_in_one_chunk", "upper_hex_sizes"])
def test_fast_reader_takes_every_usual_chunking_and_agrees_with_the_exact_one(shape):
    events = _tokens(30) + [b'data: {"choices":[],"usage":{"prompt_tokens":4,'
                            b'"completion_tokens":30}}\n\n', b"data: [DONE]\n\n"]
    chunks = {"one_per_chunk": events,
              "last_chunk_holds_three": events[:-3] + [b"".join(events[-3:])],
              "coalesced": [b"".join(events[i:i + 4]) for i in range(0, len(events), 4)],
              "all_in_one_chunk": [b"".join(events)],
              "upper_hex_sizes": events}[shape]
    body = _body(chunks)
    if shape == "upper_hex_sizes":
        body = b"".join(b"%X\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    took_fast, fast, exact, problem = _both_readers([(1, body)])
    assert problem is None and exact.chunk_ns == [1] * 30 and exact.output_tokens == 30
    assert took_fast and (fast.chunk_ns, fast.output_tokens, fast.prompt_tokens) == (
        exact.chunk_ns, 30, 4)


@pytest.mark.parametrize("damage", ["multi_line_event", "lf_in_size_line", "size_off_by_one",
                                    "size_extension", "no_done_last", "comment_chunk"])
def test_fast_reader_declines_damaged_or_unusual_framing(damage):
    # each is read by the exact reader, whose verdict (failure or tokens) then stands
    events = _tokens(10) + [b"data: [DONE]\n\n"]
    body = _body(events)
    if damage == "multi_line_event":  # an LF inside a chunk's one event
        body = _body([events[0], b'data: {"choices":[{"text"\n:"x"}]}\n\n'] + events[1:])
    elif damage == "lf_in_size_line":  # int() would take "1f\n" as a size
        first = b"%x\n\r\n%s\r\n" % (len(events[0]), events[0])
        body = first + _body(events[1:])
    elif damage == "size_off_by_one":
        body = b"%x\r\n%s\r\n" % (len(events[0]) + 1, events[0]) + _body(events[1:])
    elif damage == "size_extension":
        body = b"%x;x=1\r\n%s\r\n" % (len(events[0]), events[0]) + _body(events[1:])
    elif damage == "no_done_last":
        body = _body(events[:-1] + [b"data: [DONE]\n\n", events[0]])
    elif damage == "comment_chunk":
        body = _body(events[:3] + [b": keep-alive\n\n"] + events[3:])
    reads = [(1, body)]
    assert not response.read_stream_quick(RequestRecord(index=0, request_id="f", scheduled_ns=0),
                                          reads)


@pytest.mark.parametrize("crlf", [False, True])
def test_events_coalesced_in_one_chunk_are_timed_by_the_read_that_completed_each(crlf):
    # a proxy may put several events in one HTTP chunk; a read that ends between two of them
    # gives the first its own time, in both readers (the fast one took it so; the exact one took
    # the chunk's end), and a CR LF cut between two reads is still one line end
    sep = b"\r\n\r\n" if crlf else b"\n\n"
    events = [b'data: {"choices":[{"text":"a"}]}' + sep, b'data: {"choices":[{"text":"b"}]}' + sep]
    body = chunk(b"".join(events)) + chunk(b"data: [DONE]" + sep) + b"0\r\n\r\n"
    first_end = len(b"%x\r\n" % len(b"".join(events))) + len(events[0])
    cut = first_end - 1 if crlf else first_end  # crlf: between the last CR and LF of event 1
    record, _ = run_exchange([HEAD, body[:cut], body[cut:]])
    assert record.ok, record.error
    assert record.chunk_ns == ([3000, 3000] if crlf else [2000, 3000])
    if not crlf:
        took_fast, fast, exact, problem = _both_readers([(2000, body[:cut]), (3000, body[cut:])])
        assert problem is None and took_fast and fast.chunk_ns == exact.chunk_ns == [2000, 3000]


@pytest.mark.parametrize("chat", [False, True])
def test_a_head_however_it_arrives_gives_the_same_record(chat):
    # the head alone, the head with the body in one read (kept whole: the body is not copied
    # out of it), a head over several reads, the last chunk's bytes alone: every split of the
    # same response reads as one record, and the body's size is counted without the head
    events = CHAT if chat else [
        b'data: {"choices":[{"index":0,"text":"a"}]}\n\n',
        b'data: {"choices":[{"index":0,"text":""}]}\n\n',
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n',
        b"data: [DONE]\n\n"]
    body = b"".join(chunk(e) for e in events) + b"0\r\n\r\n"
    whole = HEAD + body
    splits = {"head alone": [HEAD, body], "one read": [whole],
              "head over reads": [HEAD[:9], HEAD[9:40], HEAD[40:] + body[:30], body[30:]],
              "end alone": [whole[:-3], whole[-3:]],
              "every byte": [whole[i:i + 1] for i in range(len(whole))]}
    records = {}
    for name, reads in splits.items():
        assert b"".join(reads) == whole
        record, ex = run_exchange(reads)
        assert record.ok and ex.size == len(body), name
        records[name] = (record.output_tokens, record.prompt_tokens, len(record.chunk_ns))
    assert len(set(records.values())) == 1, records
    _, ex = run_exchange([whole])
    assert ex.skip == len(HEAD) and ex.reads[0][1] is whole  # kept, not copied
    assert b"".join(d for _, d in ex.body_reads()) == body
