"""Workloads: exact lengths with a real tokenizer, distributions, mixes, shared prefixes,
datasets, and clear errors for bad input."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import urllib.request
from collections import Counter

import numpy as np
import pytest

from fakeserver import FakeServer
from latscope.errors import ConfigError
from latscope.load import BenchConfig
from latscope.load.config import LengthDist, WorkloadSpec, load_workload_file, parse_mix, parse_slo
from latscope.load.prepare import pick_tokenizer
from latscope.load.workload import LocalTokenizer, ServerTokenizer, WordTokenizer, build_workload


def test_exact_input_lengths_with_a_local_tokenizer(tokenizer_dir):
    tok = LocalTokenizer(tokenizer_dir)
    spec = WorkloadSpec(input_len="5..300", output_len="32")
    wl = build_workload(spec, 40, tok, seed=3)
    assert wl.exact and not wl.notes
    for p in wl.prompts:
        assert len(tok.encode(p.text)) == p.prompt_tokens
    lengths = [p.prompt_tokens for p in wl.prompts]
    assert min(lengths) >= 5 and max(lengths) <= 300 and len(set(lengths)) > 10
    assert {p.output_tokens for p in wl.prompts} == {32}


def test_same_seed_same_prompts_other_seed_others(tokenizer_dir):
    tok = LocalTokenizer(tokenizer_dir)
    spec = WorkloadSpec(input_len="64")
    a = [p.text for p in build_workload(spec, 5, tok, seed=1).prompts]
    b = [p.text for p in build_workload(spec, 5, tok, seed=1).prompts]
    c = [p.text for p in build_workload(spec, 5, tok, seed=2).prompts]
    assert a == b and a != c


def test_shared_prefix_share_and_exact_lengths(tokenizer_dir):
    tok = LocalTokenizer(tokenizer_dir)
    spec = WorkloadSpec(input_len="200", prefix_len=120, prefix_fraction=0.5)
    wl = build_workload(spec, 200, tok, seed=0)
    shared = [p for p in wl.prompts if p.group == "shared_prefix"]
    assert 70 <= len(shared) <= 130  # binomial(200, 0.5): far outside this would be a bug
    ids = [tok.encode(p.text) for p in shared]
    # all shared prompts start with the same token ids (the last prefix token may merge)
    assert len({tuple(i[:110]) for i in ids}) == 1
    assert all(p.prompt_tokens == 200 for p in wl.prompts)


def test_mix_weights_and_lengths():
    mix = parse_mix("short:0.9:16:8,long:0.1:64..80:100~10")
    spec = WorkloadSpec(mix=mix)
    wl = build_workload(spec, 2000, WordTokenizer(), seed=0)
    groups = Counter(p.group for p in wl.prompts)
    assert 0.87 < groups["short"] / 2000 < 0.93
    longs = [p for p in wl.prompts if p.group == "long"]
    assert all(64 <= p.prompt_tokens <= 80 for p in longs)
    assert abs(np.mean([p.output_tokens for p in longs]) - 100) < 3
    assert not wl.exact and "approximate" in wl.notes[0]


def test_server_tokenizer_is_used_when_the_server_has_one():
    with FakeServer() as srv:
        tok = ServerTokenizer(srv.url, "fake-model", {})
        assert tok.works()
        wl = build_workload(WorkloadSpec(input_len="33"), 3, tok, seed=0)
    assert wl.exact and all(len(p.text.split()) == 33 for p in wl.prompts)


def test_sharegpt_and_jsonl_datasets(tmp_path, tokenizer_dir):
    tok = LocalTokenizer(tokenizer_dir)
    sharegpt = tmp_path / "sg.json"
    sharegpt.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "what is the time"},
                           {"from": "gpt", "value": "it is time to go home now"}]},
        {"conversations": [{"from": "gpt", "value": "skipped: starts with gpt"}]},
    ]))
    wl = build_workload(WorkloadSpec(dataset=str(sharegpt)), 3, tok, seed=0)
    assert {p.text for p in wl.prompts} == {"what is the time"}
    assert wl.prompts[0].output_tokens == len(tok.encode("it is time to go home now"))
    assert "repeat" in wl.notes[0]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"prompt": "one two", "output_len": 7}\n\n{"prompt": "three"}\n')
    wl = build_workload(WorkloadSpec(dataset=str(jsonl), output_len="9"), 2, tok, seed=0)
    assert sorted((p.text, p.output_tokens) for p in wl.prompts) == [("one two", 7),
                                                                     ("three", 9)]


@pytest.mark.parametrize("text", ["abc", "10..5", "1~", "-3"])
def test_bad_lengths(text):
    with pytest.raises(ConfigError):
        LengthDist.parse(text)


def test_bad_inputs_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="NAME:WEIGHT:IN:OUT"):
        parse_mix("short:0.9:16")
    with pytest.raises(ConfigError, match="SLO"):
        parse_slo("latency=5")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(ConfigError, match="bad.jsonl:2"):
        build_workload(WorkloadSpec(dataset=str(bad)), 1, WordTokenizer(), seed=0)
    with pytest.raises(ConfigError, match="no tokenizer.json"):
        LocalTokenizer(tmp_path)


def test_workload_file_toml(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text('prefix_len = 32\nprefix_fraction = 0.25\n\n[[mix]]\nname = "chat"\n'
                    'weight = 3\ninput_len = "100..200"\noutput_len = "50"\n')
    data = load_workload_file(path)
    assert data["prefix_len"] == 32 and data["mix"][0].input_len == LengthDist("uniform", 100, 200)
    path.write_text("surprise = 1\n")
    with pytest.raises(ConfigError, match="unknown workload keys"):
        load_workload_file(path)
    # a mix entry without a weight, or a mix that is not a list of tables: one line, no traceback
    path.write_text('[[mix]]\nname = "chat"\ninput_len = "100"\noutput_len = "50"\n')
    with pytest.raises(ConfigError, match="each mix entry needs"):
        load_workload_file(path)
    path.write_text('mix = ["short"]\n')
    with pytest.raises(ConfigError, match="each mix entry needs"):
        load_workload_file(path)


def _connections(url: str) -> int:
    with urllib.request.urlopen(url + "/connections", timeout=30) as resp:
        return int(json.loads(resp.read()))


def test_the_server_tokenizer_builds_every_prompt_over_one_connection():
    with FakeServer() as srv:
        before = _connections(srv.url)
        tok = ServerTokenizer(srv.url, "fake-model", {})
        assert tok.works()
        wl = build_workload(WorkloadSpec(input_len="5..40"), 200, tok, seed=1)
        opened = _connections(srv.url) - before - 1  # the count's own GET is one
    assert len(wl.prompts) == 200 and wl.exact
    assert opened == tok.connections == 1


def _one_answer_per_connection(listener: socket.socket, stop: threading.Event,
                               dropped: threading.Semaphore) -> None:
    """A server that answers one keep-alive request per connection, then drops it unannounced,
    as a server with a short idle timeout does."""
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            sock, _ = listener.accept()
        except TimeoutError:
            continue
        with sock:
            sock.recv(65536)
            body = b'{"tokens": [1, 2, 3]}'
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
        dropped.release()


def test_the_server_tokenizer_reconnects_when_the_server_drops_a_kept_connection():
    listener = socket.create_server(("127.0.0.1", 0))
    stop, dropped = threading.Event(), threading.Semaphore(0)
    thread = threading.Thread(target=_one_answer_per_connection, args=(listener, stop, dropped))
    thread.start()
    try:
        tok = ServerTokenizer(f"http://127.0.0.1:{listener.getsockname()[1]}", "m", {})
        for _ in range(3):
            assert tok.encode("a b c") == [1, 2, 3]
            assert dropped.acquire(timeout=10)  # the kept connection is closed at the far end
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert tok.connections == 3


class _ModelServer(http.server.BaseHTTPRequestHandler):
    """/v1/models naming a model folder, and a /tokenize that is that folder's tokenizer
    (``faithful``) or one token per word (a server with another model at the same path)."""

    root = ""
    faithful = True

    def do_GET(self) -> None:
        self._json({"data": [{"id": "m", "root": self.root, "max_model_len": 4096}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path == "/tokenize" and self.faithful:
            self._json({"tokens": LocalTokenizer(self.root).encode(body["prompt"])})
        elif self.path == "/tokenize":
            self._json({"tokens": list(range(len(body["prompt"].split())))})
        else:
            self._json({"prompt": " ".join("w" for _ in body["tokens"])})

    def _json(self, obj: object) -> None:
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("faithful", [True, False])
def test_the_servers_own_model_folder_tokenizes_locally_when_it_matches(tokenizer_dir, faithful):
    handler = type("H", (_ModelServer,), {"root": str(tokenizer_dir), "faithful": faithful})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        tok = pick_tokenizer(BenchConfig(url=url), url, "m", {})
    finally:
        server.shutdown()
        thread.join()
    if faithful:  # the folder is here and tokenizes as the server does: no /tokenize per prompt
        assert isinstance(tok, LocalTokenizer) and str(tokenizer_dir) in tok.source
        assert "matches its /tokenize" in tok.source
    else:  # same path, other tokenizer: the server's counts are the truth
        assert isinstance(tok, ServerTokenizer)
