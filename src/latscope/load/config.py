"""Everything one load run needs, as plain dataclasses, plus the small text syntaxes of the CLI.

``BenchConfig`` is the contract that ``sweep`` and ``tune`` drive ``run_bench`` with; defaults make
``BenchConfig(url=..., num_requests=20, concurrency=4)`` a complete run. Length distributions are
written ``128`` (fixed), ``64..256`` (uniform, inclusive) or ``128~32`` (normal: mean~std, clipped
to >= 1); a mix is ``NAME:WEIGHT:IN:OUT`` entries separated by commas
(``short:0.9:128:64,long:0.1:2048:256``) or a TOML/YAML workload file; an SLO is
``ttft=200,tpot=50,e2e=2000`` in milliseconds.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from latscope.errors import ConfigError
from latscope.redact import redact_url_password
from latscope.stats import DEFAULT_PERCENTILES, SLO_KEYS

_FIXED = re.compile(r"^\s*(\d+)\s*$")
_UNIFORM = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*$")
_NORMAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*~\s*(\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: ``kind`` is fixed | uniform | normal."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str | int) -> LengthDist:
        text = str(text)
        if m := _FIXED.match(text):
            return cls("fixed", int(m[1]))
        if m := _UNIFORM.match(text):
            lo, hi = int(m[1]), int(m[2])
            if lo > hi:
                raise ConfigError(f"length range {text!r}: low end is above high end")
            return cls("uniform", lo, hi)
        if m := _NORMAL.match(text):
            return cls("normal", float(m[1]), float(m[2]))
        raise ConfigError(f"bad length {text!r}: use 128, 64..256 (uniform) or 128~32 (normal)")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            values = np.full(n, self.a)
        elif self.kind == "uniform":
            values = rng.integers(int(self.a), int(self.b) + 1, size=n)
        else:
            values = np.rint(rng.normal(self.a, self.b, size=n))
        return np.maximum(values, 1).astype(np.int64)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"{int(self.a)}"
        return f"{int(self.a)}..{int(self.b)}" if self.kind == "uniform" else f"{self.a:g}~{self.b:g}"


@dataclass(frozen=True)
class MixEntry:
    name: str
    weight: float
    input_len: LengthDist
    output_len: LengthDist


@dataclass
class WorkloadSpec:
    """What prompts to send. With ``dataset`` set, prompts (and, for ShareGPT, output lengths)
    come from the file; otherwise synthetic prompts of ``input_len`` tokens, or of ``mix``."""

    input_len: str = "128"
    output_len: str = "64"
    mix: list[MixEntry] = field(default_factory=list)
    dataset: str | None = None
    dataset_format: str = "auto"  # auto | sharegpt | jsonl
    prefix_len: int = 0  # shared-prefix workloads: this many tokens shared by ...
    prefix_fraction: float = 0.0  # ... this share of the prompts (0..1)
    ignore_eos: bool = True


@dataclass
class BenchConfig:
    url: str = ""  # base URL, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted)
    endpoint: str = "completions"  # completions | chat
    model: str | None = None  # None: the first model of GET /v1/models
    api_key: str | None = field(default=None, repr=False)
    stream: bool = True
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    concurrency: int | None = None  # closed loop (or a cap on in-flight requests with rate)
    rate: float | None = None  # open loop, requests/s; None: closed loop
    burstiness: float = 1.0  # gamma shape; 1.0 is Poisson
    num_requests: int | None = 64
    duration_s: float | None = None
    warmup: int = 0  # requests sent (and waited for) before measuring, excluded from stats
    seed: int = 0
    # the request sizes' own seed (mix entry, lengths, shared prefix or not; the texts stay the
    # seed's): an A/B gives both runs of a pair the same one (campaign.experiment). None: the
    # sizes come from ``seed`` too
    size_seed: int | None = None
    # closed loop: the slots' first sends spread over one request time (latscope.load.stagger);
    # False sends them all at once (a burst, on purpose)
    stagger: bool = True
    slo: dict[str, float] | None = None  # ms, keys ttft/tpot/itl/e2e
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    output_dir: Path | None = None  # None: ./latscope-runs/bench-<UTC time>
    request_timeout_s: float = 600.0
    tokenizer: str | None = None  # a dir or tokenizer.json for exact token counts
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    # "cost": set vLLM's `priority` from each prompt's tokens + max_tokens (docs/gateway.md)
    priority_by: str | None = None
    per_chunk_usage: bool = False  # ask vLLM for usage in every chunk (tokens per chunk)
    trace_requests: bool = False  # send a fresh W3C traceparent per request (its trace id joins
    # the request with the server's OTLP span of it)
    use_uvloop: bool = True
    # A response larger than this is cut and counted as an error (a runaway or hostile server
    # must not take the client's memory): 64 MiB is ~300k streamed tokens of vLLM's SSE.
    max_response_bytes: int = 64 << 20

    def validate(self) -> None:
        for name in ("rate", "burstiness", "duration_s", "request_timeout_s"):
            value = getattr(self, name)
            # nan passes every "<= 0" test below: refused here, by name
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number (got {value})")
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"url must start with http:// (got {self.url!r})")
        if self.url.startswith("https://"):
            raise ConfigError("https is not supported by the streaming client yet; use http://")
        if self.endpoint not in ("completions", "chat"):
            raise ConfigError(f"endpoint must be completions or chat (got {self.endpoint!r})")
        if self.rate is not None and self.rate <= 0:
            raise ConfigError("rate must be > 0 requests/s")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError("concurrency must be >= 1")
        if self.burstiness <= 0:
            raise ConfigError("burstiness must be > 0")
        if not self.num_requests and not self.duration_s:
            raise ConfigError("give num_requests or duration_s")
        if (self.num_requests or 0) < 0 or (self.duration_s or 0) < 0 or self.warmup < 0:
            raise ConfigError("num_requests, duration and warmup must not be negative")
        if self.priority_by not in (None, "cost"):
            raise ConfigError(f"priority_by must be cost (got {self.priority_by!r})")
        if self.max_response_bytes <= 0:
            raise ConfigError("max response size must be > 0 bytes")
        if self.request_timeout_s <= 0:
            raise ConfigError("request timeout must be > 0 s")
        if self.slo:
            unknown = set(self.slo) - set(SLO_KEYS)
            if unknown:
                raise ConfigError(f"unknown SLO metric(s) {sorted(unknown)}; use {SLO_KEYS}")
        if not self.percentiles or not all(0 <= p <= 100 for p in self.percentiles):
            # checked up front: numpy would raise only when the summary is made, after the run
            raise ConfigError(f"percentiles must be within 0..100 (got {self.percentiles})")
        if not 0 <= self.workload.prefix_fraction <= 1:
            raise ConfigError("prefix fraction must be within 0..1")

    def public_dict(self) -> dict[str, Any]:
        """The config as JSON-ready data, minus secrets (the API key is never written)."""
        data = dataclasses.asdict(self)
        data["api_key"] = "<set>" if self.api_key else None
        data["url"] = redact_url_password(self.url) if self.url else self.url
        data["output_dir"] = str(self.output_dir) if self.output_dir else None
        data["workload"]["mix"] = [
            {"name": m.name, "weight": m.weight, "input_len": str(m.input_len),
             "output_len": str(m.output_len)} for m in self.workload.mix]
        return data


def parse_slo(text: str | None) -> dict[str, float] | None:
    """bench's goodput SLO: the per-request terms of latscope's one grammar (``latscope.slo``),
    ``ttft<=200,tpot<=50`` (the older ``ttft=200`` still reads the same), in ms."""
    from latscope.slo import parse

    terms = parse(text)
    if not terms:
        return None
    slo = {}
    for term in terms:
        if not term.per_request or term.op not in ("<=", "<"):
            raise ConfigError(f"--slo {term}: bench's goodput counts requests that meet "
                              "per-request limits (ttft<=MS, tpot<=MS, itl<=MS, e2e<=MS); "
                              "percentile terms such as ttft_p99<=MS are judged per step by "
                              "sweep, tune and diagnose")
        slo[term.metric] = term.limit
    return slo


def parse_mix(text: str) -> list[MixEntry]:
    entries = []
    for part in text.split(","):
        fields = part.strip().split(":")
        if len(fields) != 4:
            raise ConfigError(f"bad mix entry {part!r}: use NAME:WEIGHT:IN:OUT")
        name, weight, inp, out = fields
        try:
            w = float(weight)
        except ValueError:
            raise ConfigError(f"bad mix weight {weight!r}") from None
        entries.append(MixEntry(name, w, LengthDist.parse(inp), LengthDist.parse(out)))
    return _check_mix(entries)


def load_workload_file(path: str | Path) -> dict[str, Any]:
    """A TOML or YAML file with any of the WorkloadSpec keys and a ``mix`` list of tables
    (``name``, ``weight``, ``input_len``, ``output_len``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read workload file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"workload file {path}: not UTF-8 text (byte {exc.start}); expected "
                          "TOML or YAML") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml
            data = yaml.safe_load(text) or {}
        else:
            import tomllib
            data = tomllib.loads(text)
    except Exception as exc:  # both parsers have their own error classes
        raise ConfigError(f"{path}: not valid {path.suffix.lstrip('.') or 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of workload settings")
    if "mix" in data:
        try:
            data["mix"] = _check_mix([MixEntry(str(m.get("name", f"m{i}")), float(m["weight"]),
                                               LengthDist.parse(m["input_len"]),
                                               LengthDist.parse(m["output_len"]))
                                      for i, m in enumerate(data["mix"])])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # a one-line error, not a traceback, for a mix entry missing a key or not a table
            raise ConfigError(f"{path}: each mix entry needs name, weight, input_len and "
                              f"output_len ({type(exc).__name__}: {exc})") from None
    known = {f.name for f in dataclasses.fields(WorkloadSpec)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{path}: unknown workload keys {sorted(unknown)}")
    return data


def _check_mix(entries: list[MixEntry]) -> list[MixEntry]:
    if not entries or any(e.weight < 0 for e in entries) or sum(e.weight for e in entries) <= 0:
        raise ConfigError("mix weights must be >= 0 and not all zero")
    return entries
