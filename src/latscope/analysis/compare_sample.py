"""One run's requests as ``latscope compare`` needs them, read in one pass over requests.jsonl.

A line is read, made a record, reduced to a few numbers and dropped: per measured request its
latency origin, TTFT, TPOT, E2E, whether it failed (and met the SLO), its token counts, its ITL
sum and count. Token gaps, the bulk of a long run, are
kept only for a sample of requests: every request gets a random key, and the requests of the
smallest keys are kept while their gaps fit ``ITL_GAP_BUDGET`` (a uniform sample of requests, so
pooled ITL percentiles over it estimate the run's; the comparison says when it sampled).
Memory is then ~70 bytes a request plus the budget, whatever the run's length or output sizes.

The file is read line by line, never whole; a torn *last* line (a crash mid-write) is skipped and
a bad line anywhere else is an error naming it, as ``rundir.iter_jsonl`` does.
"""

from __future__ import annotations

import heapq
import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import orjson

from latscope.errors import ConfigError
from latscope.model import RequestRecord
from latscope.rundir import REQUESTS
from latscope.slo import parse as parse_slo
from latscope.stats import meets_slo, origin_ns

# token gaps kept for pooled ITL percentiles (256 KiB of float32): their bootstrap costs draws x
# gaps: 2^20 gaps took minutes, 2^18 51 s of a 60 s comparison of two runs of 5000 x 512 tokens
# (benchmarks/compare_scale.py); 2^16 are 128 requests of 512 tokens, 1024 of 64
ITL_GAP_BUDGET = 1 << 16
_NS_PER_MS = 1e6


@dataclass
class RunSample:
    """One run's per-request figures (send order once ``finish``ed), and its counts."""

    path: Path
    origins: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    ttft: np.ndarray = field(default_factory=lambda: np.empty(0))
    tpot: np.ndarray = field(default_factory=lambda: np.empty(0))
    e2e: np.ndarray = field(default_factory=lambda: np.empty(0))
    failed: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=bool))
    good: np.ndarray | None = None  # met the SLO (None: no SLO to judge by)
    itl_sum: np.ndarray = field(default_factory=lambda: np.empty(0))
    itl_count: np.ndarray = field(default_factory=lambda: np.empty(0))
    prompt_tokens: np.ndarray = field(default_factory=lambda: np.empty(0))
    output_tokens: np.ndarray = field(default_factory=lambda: np.empty(0))
    # pooled ITL gaps of the sampled requests and which of them (0.., in send order) each is
    itl_gaps: np.ndarray = field(default_factory=lambda: np.empty(0))
    itl_request: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    itl_sampled: int = 0  # requests whose gaps were kept (of those with any)
    itl_requests: int = 0
    warmup: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    closed_loop: bool = True  # no request was sent on an arrival schedule (--rate)

    @property
    def measured(self) -> int:
        return int(self.origins.size)

    @property
    def completed(self) -> int:
        return int((~self.failed).sum())

    def in_flight(self) -> float | None:
        """Mean requests in flight over the run (Little's law: summed E2E over the span)."""
        ok = ~np.isnan(self.e2e)
        if not ok.any() or self.origins.size < 2:
            return None
        span_ns = float(self.origins.max() - self.origins.min()) + float(
            np.nanmax(self.e2e)) * _NS_PER_MS
        return float(np.nansum(self.e2e) * _NS_PER_MS / span_ns) if span_ns > 0 else None


class _Collector:
    """Columns grown a request at a time (``array``: 8 bytes a value, no Python objects)."""

    def __init__(self, slo: dict[str, float] | None, seed: int) -> None:
        self.slo = slo
        self.cols = {name: array("d") for name in
                     ("ttft", "tpot", "e2e", "itl_sum", "itl_count", "prompt", "output")}
        self.origins = array("q")
        self.failed, self.good = array("b"), array("b")
        self.rng = np.random.default_rng(seed)
        self.heap: list[tuple[float, int, np.ndarray]] = []  # (-key, request, gaps)
        self.heap_gaps = 0
        self.itl_requests = 0
        self.warmup = 0
        self.errors: dict[str, int] = {}
        self.open_loop = False

    def add(self, r: RequestRecord) -> None:
        if r.warmup:
            self.warmup += 1
            return
        ok = r.ok
        good = bool(self.slo) and ok and meets_slo(r, self.slo or {})
        index = len(self.origins)
        self.open_loop |= r.open_loop
        start = origin_ns(r)
        self.origins.append(start)
        self.failed.append(not ok)
        self.good.append(good)
        if not ok:
            kind = r.error_kind or "incomplete"
            self.errors[kind] = self.errors.get(kind, 0) + 1
        first, end, out = r.first_token_ns, r.end_ns, r.output_tokens
        cols = self.cols
        cols["ttft"].append((first - start) / _NS_PER_MS if ok and first is not None else math.nan)
        cols["e2e"].append((end - start) / _NS_PER_MS if ok and end is not None else math.nan)
        cols["tpot"].append((end - first) / _NS_PER_MS / (out - 1)
                            if ok and first is not None and end is not None and out and out >= 2
                            else math.nan)
        cols["prompt"].append(float(r.prompt_tokens or 0))
        cols["output"].append(float(out or 0))
        self._add_gaps(index, r.chunk_ns if ok else [])

    def _add_gaps(self, index: int, times: list[int]) -> None:
        if len(times) < 2:
            self.cols["itl_sum"].append(0.0)
            self.cols["itl_count"].append(0.0)
            return
        gaps = np.diff(np.asarray(times, dtype=np.int64)) / _NS_PER_MS
        self.cols["itl_sum"].append(float(gaps.sum()))
        self.cols["itl_count"].append(float(gaps.size))
        self.itl_requests += 1
        key = float(self.rng.random())
        heapq.heappush(self.heap, (-key, index, gaps.astype(np.float32)))
        self.heap_gaps += gaps.size
        # keep the smallest keys that fit: a uniform sample of requests (one always stays)
        while self.heap_gaps > ITL_GAP_BUDGET and len(self.heap) > 1:
            _, _, dropped = heapq.heappop(self.heap)
            self.heap_gaps -= dropped.size

    def finish(self, path: Path) -> RunSample:
        order = np.argsort(np.frombuffer(self.origins, dtype=np.int64), kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)

        def col(name: str) -> np.ndarray:
            return np.frombuffer(self.cols[name], dtype=np.float64)[order]

        kept = sorted(self.heap, key=lambda e: rank[e[1]])
        sample = RunSample(
            path=path, origins=np.frombuffer(self.origins, dtype=np.int64)[order],
            ttft=col("ttft"), tpot=col("tpot"), e2e=col("e2e"),
            failed=np.frombuffer(self.failed, dtype=np.int8)[order].astype(bool),
            good=(np.frombuffer(self.good, dtype=np.int8)[order].astype(bool)
                  if self.slo else None),
            itl_sum=col("itl_sum"), itl_count=col("itl_count"),
            prompt_tokens=col("prompt"), output_tokens=col("output"),
            itl_gaps=(np.concatenate([g for _, _, g in kept]).astype(np.float64)
                      if kept else np.empty(0)),
            # the sampled requests numbered 0.. in send order (the draws' units)
            itl_request=(np.concatenate([np.full(g.size, j) for j, (_, _, g) in enumerate(kept)])
                         if kept else np.empty(0, dtype=np.int64)),
            itl_sampled=len(kept), itl_requests=self.itl_requests, warmup=self.warmup,
            errors=dict(self.errors), closed_loop=not self.open_loop)
        return sample


def read_sample(run_dir: Path, slo: str | dict[str, float] | None = None, *,
                seed: int = 0) -> RunSample:
    """One pass over ``run_dir/requests.jsonl`` (see the module's docstring)."""
    slo_ms = goodput_slo(slo) if isinstance(slo, str) else slo
    collector = _Collector(slo_ms or None, seed)
    path = Path(run_dir) / REQUESTS
    for obj in _stream_jsonl(path):
        try:
            record = RequestRecord.from_dict(obj)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: request {obj.get('index', '?')!r} is not a request "
                              f"record latscope can read ({exc})") from None
        collector.add(record)
    return collector.finish(Path(run_dir))


def goodput_slo(text: str | None) -> dict[str, float]:
    """The per-request terms of an SLO (``ttft<=500,tpot<=50``): what goodput counts."""
    return {t.metric: t.limit for t in parse_slo(text) if t.per_request and t.op in ("<=", "<")}


def _stream_jsonl(path: Path) -> Iterator[dict]:
    """The objects of a JSONL file, a line at a time; a torn last line is skipped."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise ConfigError(f"{path.parent}: no {path.name} (not a load run)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        pending: tuple[int, bytes] | None = None
        for lineno, line in enumerate(f, 1):
            if pending is not None:
                yield _parsed(path, *pending, last=False)
                pending = None
            if line.strip():
                pending = (lineno, line)
        if pending is not None:
            try:
                yield _parsed(path, *pending, last=True)
            except _Torn:
                return


class _Torn(Exception):
    pass


def _parsed(path: Path, lineno: int, line: bytes, *, last: bool) -> dict:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        if last:
            raise _Torn from None
        raise ConfigError(f"{path}:{lineno}: not a JSON line") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}:{lineno}: not a JSON object")
    return obj
