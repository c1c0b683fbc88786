"""The prompts a run sends: synthetic ones of exact token length, mixes, shared prefixes, datasets.

Token counts are exact when a tokenizer is at hand: a local HF ``tokenizer.json`` (``--tokenizer``,
read with the ``tokenizers`` package) or the server's own ``/tokenize``/``/detokenize`` (vLLM has
both). A synthetic prompt is built the way vllm bench serve's random dataset is: random token ids
(drawn from the ids of ordinary English words, so no special tokens), decoded to text, re-encoded,
and trimmed or padded until the re-encoded length is the target. Without a tokenizer, one word is
taken as one token and the workload says that its counts are approximate. Each prompt is drawn
from its own random stream and built as the run sends it (``latscope.load.promptsource``).
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from latscope.errors import ConfigError, TargetError
from latscope.load.config import LengthDist, WorkloadSpec
from latscope.load.promptsource import _WORDS, FixedPrompts, Prompt, PromptMaker, SyntheticPrompts, Tokenizer


class LocalTokenizer:
    """A HF ``tokenizer.json`` read with the ``tokenizers`` package (no transformers needed)."""

    exact = True

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:
            raise ConfigError("--tokenizer needs the 'tokenizers' package: "
                              "pip install tokenizers") from None
        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise ConfigError(f"no tokenizer.json at {path}")
        try:
            self._tok = HFTokenizer.from_file(str(file))
        except Exception as exc:  # tokenizers raises a bare Exception subclass
            raise ConfigError(f"cannot load tokenizer {file}: {exc}") from None
        self.source = f"local:{file}"

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(map(int, ids)))


class ServerTokenizer:
    """vLLM's ``POST /tokenize`` and ``/detokenize`` (setup only; never during measurement:
    prompts measured with it are all built before the run).

    Building one synthetic prompt takes a decode and an encode or more, so every call goes over
    one kept-alive connection: a new connection per call opened ~2 TCP connections per prompt
    (8,452 for a 4,096-request run, measured with strace), each a handshake's worth of setup time
    and a socket left in TIME_WAIT on both ends."""

    exact = True

    def __init__(self, base_url: str, model: str, headers: dict[str, str]) -> None:
        self.base_url, self.model, self.headers = base_url, model, headers
        self.source = f"server:{base_url}/tokenize"
        self.problem = ""
        self.connections = 0  # TCP connections opened so far (one unless the server closes)
        self._conn: http.client.HTTPConnection | None = None
        self._used = False  # whether _conn has carried a request (a server may drop idle ones)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            parts = urlsplit(self.base_url)
            kind = http.client.HTTPSConnection if parts.scheme == "https" else \
                http.client.HTTPConnection
            self._conn = kind(parts.hostname or "", parts.port, timeout=30)
            self._used = False
            self.connections += 1
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _round_trip(self, path: str, payload: bytes) -> tuple[int, bytes]:
        """One POST over the kept connection; once more on a fresh one when the server had
        closed the kept one (an idle timeout), never after an answer began."""
        headers = {"content-type": "application/json", **self.headers}
        target = urlsplit(self.base_url).path + path
        while True:
            conn = self._connection()
            reused = self._used
            try:
                conn.request("POST", target, payload, headers)
                self._used = True
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if reused:
                    continue
                raise
            except BaseException:
                self.close()
                raise
            try:
                body = resp.read()
            except BaseException:
                self.close()
                raise
            if resp.will_close:
                self.close()
            return resp.status, body

    def _post(self, path: str, body: dict[str, Any], key: str) -> Any:
        """``body`` posted to ``path``; the ``key`` field of the JSON answer. Any failure is one
        TargetError naming the endpoint and the cause (never a transport traceback)."""
        try:
            status, data = self._round_trip(path, json.dumps(body).encode())
            if status != 200:
                raise TargetError(f"{self.base_url}{path}: HTTP {status}")
            return json.loads(data)[key]
        except TargetError:
            raise
        except OSError as exc:
            cause = str(exc) or type(exc).__name__
        except http.client.HTTPException as exc:  # LineTooLong, BadStatusLine, IncompleteRead
            cause = f"not a valid HTTP response ({type(exc).__name__}: {str(exc)[:80]})"
        except (ValueError, KeyError, TypeError):
            cause = f"no JSON object with {key!r}"
        raise TargetError(f"{self.base_url}{path}: {cause}")

    def encode(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return list(self._post("/tokenize", body, "tokens"))

    def decode(self, ids: list[int]) -> str:
        body = {"model": self.model, "tokens": list(map(int, ids))}
        return str(self._post("/detokenize", body, "prompt"))

    def works(self) -> bool:
        """Whether the server tokenizes; ``problem`` says why not (kept for the workload notes)."""
        try:
            ids = self.encode("hello world")
            return bool(ids) and isinstance(self.decode(ids), str)
        except (TargetError, TypeError, ValueError) as exc:
            self.problem = str(exc)
            return False


_WORD_INDEX = {w: i for i, w in enumerate(_WORDS)}


class WordTokenizer:
    """No tokenizer: one word = one token. Counts are approximate and the summary says so."""

    exact = False
    source = "approximate:words"

    def __init__(self, reason: str = "") -> None:
        self.reason = reason  # why no real tokenizer was used (e.g. /tokenize failed)

    def encode(self, text: str) -> list[int]:
        index = _WORD_INDEX  # built once: rebuilt per call it was ~10 of a prompt's ~26 us
        return [index.get(w, 0) for w in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(_WORDS[int(i) % len(_WORDS)] for i in ids)


@dataclass
class Workload:
    prompts: FixedPrompts | SyntheticPrompts
    tokenizer: str  # where the counts come from
    exact: bool  # False: prompt lengths are approximate
    notes: list[str] = field(default_factory=list)


def build_workload(spec: WorkloadSpec, count: int, tokenizer: Tokenizer, seed: int,
                   size_seed: int | None = None) -> Workload:
    """``count`` prompts for ``spec``, reproducible from ``seed`` (their sizes from
    ``size_seed`` where it is given, synthetic ones only: a dataset's prompts are their own
    sizes): synthetic ones with a local tokenizer are built as the run sends them (``prebuild``
    builds the first), the others now."""
    maker = PromptMaker(tokenizer)
    notes: list[str] = []
    prompts: FixedPrompts | SyntheticPrompts
    try:
        if spec.dataset:
            prompts = FixedPrompts(_dataset_prompts(spec, count, tokenizer,
                                                    np.random.default_rng(seed), notes))
        else:
            prompts = SyntheticPrompts(spec, maker, seed, count, size_seed)
            if isinstance(tokenizer, ServerTokenizer):  # never asked during the measurement
                prompts = FixedPrompts(prompts.build(k) for k in range(count))
    finally:  # a server tokenizer's kept connection is not held through the run
        if isinstance(tokenizer, ServerTokenizer):
            tokenizer.close()
    if maker.inexact:
        notes.append(f"{maker.inexact} prompt(s) could not be made exactly the target length")
    if not tokenizer.exact:
        notes.append("no tokenizer: prompt lengths are approximate (one word taken as one token)")
        if reason := getattr(tokenizer, "reason", ""):
            notes.append(f"server tokenizer not used: {reason}")
    return Workload(prompts, tokenizer.source, tokenizer.exact, notes)


def _dataset_prompts(spec: WorkloadSpec, count: int, tokenizer: Tokenizer,
                     rng: np.random.Generator, notes: list[str]) -> list[Prompt]:
    path = Path(spec.dataset or "")
    pairs = _read_dataset(path, spec.dataset_format)
    if not pairs:
        raise ConfigError(f"{path}: no usable prompts found")
    order = rng.permutation(len(pairs))
    default_out = LengthDist.parse(spec.output_len)
    if count > len(pairs):
        notes.append(f"dataset has {len(pairs)} prompts; {count} requested, so prompts repeat")
    prompts = []
    for k in range(count):
        text, answer, out_len = pairs[order[k % len(pairs)]]
        if out_len is None and answer is not None:
            out_len = len(tokenizer.encode(answer))
        if not out_len:
            out_len = int(default_out.sample(rng, 1)[0])
        prompts.append(Prompt(text, len(tokenizer.encode(text)), max(int(out_len), 1), "dataset"))
    return prompts


def _read_dataset(path: Path, fmt: str) -> list[tuple[str, str | None, int | None]]:
    """(prompt, reference answer or None, output length or None) triples."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read dataset {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"dataset {path}: not UTF-8 text (byte {exc.start}); expected "
                          "ShareGPT JSON or JSONL") from None
    if fmt == "auto":
        fmt = "sharegpt" if raw.lstrip().startswith("[") else "jsonl"
    if fmt == "sharegpt":
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return [t for item in data if (t := _sharegpt_pair(item))]
    if fmt != "jsonl":
        raise ConfigError(f"unknown dataset format {fmt!r}: use sharegpt or jsonl")
    out = []
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            raise ConfigError(f"{path}:{lineno}: not a JSON object") from None
        text = item.get("prompt") or item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, str):
            raise ConfigError(f"{path}:{lineno}: needs a string 'prompt' field")
        out_len = item.get("output_len") or item.get("max_tokens")
        out.append((text, item.get("completion"), int(out_len) if out_len else None))
    return out


def _sharegpt_pair(item: Any) -> tuple[str, str | None, int | None] | None:
    turns = item.get("conversations") if isinstance(item, dict) else None
    if not isinstance(turns, list) or len(turns) < 2:
        return None
    first, second = turns[0], turns[1]
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return None
    if first.get("from") not in ("human", "user") or not first.get("value"):
        return None
    return str(first["value"]), str(second.get("value") or ""), None
