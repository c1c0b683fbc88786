"""Summary statistics of a load run: latency percentiles, throughput, goodput, errors.

The latency of a request is defined here, once, for every verb (``bench``, ``sweep``, ``tune``,
the decomposition, the progress bar); every figure is defined in ``docs/metrics.md``:

- origin = where a request's latency starts: the *scheduled* send time in an open loop (a late
  client is then counted, never hidden: coordinated omission), the actual *send* in a closed
  loop (there "scheduled" is only when the client got round to a free slot, so its own dispatch
  delay is not the server's latency; it is reported beside, as send lag);
- TTFT  = first content chunk arrival - origin;
- ITL   = every gap between consecutive content chunks of a request, pooled over requests;
- TPOT  = (end - first content chunk) / (output tokens - 1), one value per request;
- E2E   = end (last byte) - origin;
- send lag = actual send - scheduled send (the client's own delay).

``RunStats`` accumulates a run one record at a time in constant-size state per request (4 bytes
per metric per request, float32, so percentiles stay exact; ITL gaps, one per token, are kept
exact up to ``ITL_EXACT_MAX`` values and then folded into a log histogram whose error is stated
in the summary), so a run never needs its records in memory. ``summarize`` is the same over an
iterable of ``RequestRecord``s. Latencies are in milliseconds (keys end in ``_ms``), throughputs
per second, durations in seconds. Failed and warm-up requests are kept out of every latency
figure; failures are counted by kind.
"""

from __future__ import annotations

import itertools
import operator
from array import array
from collections import Counter
from typing import Any, Iterable, Sequence

import numpy as np

from latscope.itlpool import ITL_EXACT_MAX, ItlPool
from latscope.model import RequestRecord
from latscope.percentiles import DEFAULT_PERCENTILES, distribution
from latscope.steady import SteadyWindow
from latscope.twins import Gaps

__all__ = ["DEFAULT_PERCENTILES", "ITL_EXACT_MAX", "Gaps", "RunStats", "distribution",
           "summarize"]

SLO_KEYS = ("ttft", "tpot", "itl", "e2e")
_NS_PER_MS = 1e6
_ERROR_EXAMPLE_MAX = 200



def origin_ns(r: RequestRecord) -> int:
    """Where the latency of ``r`` starts: scheduled (open loop) or sent (closed loop)."""
    if r.open_loop or not r.sent_ns:
        return r.scheduled_ns
    return r.sent_ns


def latency_origin(open_loop: bool) -> str:
    return "scheduled" if open_loop else "sent"


def ttft_ms(r: RequestRecord) -> float | None:
    if r.first_token_ns is None:
        return None
    return (r.first_token_ns - origin_ns(r)) / _NS_PER_MS


def e2e_ms(r: RequestRecord) -> float | None:
    return None if r.end_ns is None else (r.end_ns - origin_ns(r)) / _NS_PER_MS


def send_lag_ms(r: RequestRecord) -> float | None:
    return (r.sent_ns - r.scheduled_ns) / _NS_PER_MS if r.sent_ns else None


def lag_in_latency_ms(r: RequestRecord) -> float | None:
    """The part of the send lag inside TTFT/E2E: all of it in an open loop, none in a closed
    one (there it is reported beside the latency, not in it)."""
    lag = send_lag_ms(r)
    return None if lag is None else (lag if r.open_loop else 0.0)


def tpot_ms(r: RequestRecord) -> float | None:
    if r.first_token_ns is None or r.end_ns is None or not r.output_tokens or r.output_tokens < 2:
        return None
    return (r.end_ns - r.first_token_ns) / _NS_PER_MS / (r.output_tokens - 1)


def itls_ms(r: RequestRecord) -> np.ndarray:
    if len(r.chunk_ns) < 2:
        return np.empty(0)
    return np.diff(np.asarray(r.chunk_ns, dtype=np.int64)) / _NS_PER_MS


def meets_slo(r: RequestRecord, slo: dict[str, float], itl_max_ms: float | None = None) -> bool:
    """True when every SLO (in ms) given is met; an undefined metric (e.g. TPOT of a one-token
    answer) counts as met, as in vllm bench serve's goodput. ``itl_max_ms``: the record's
    largest gap where the caller has it without its token times."""
    if itl_max_ms is None and len(r.chunk_ns) > 1:
        itl_max_ms = float(itls_ms(r).max())
    checks = {"ttft": ttft_ms(r), "tpot": tpot_ms(r), "e2e": e2e_ms(r), "itl": itl_max_ms}
    return all((v := checks[k]) is None or v <= limit for k, limit in slo.items())



# A usual record's fields, as RunStats.add batches them (folded by numpy, _BATCH at a time)
_batched_fields = operator.attrgetter("scheduled_ns", "sent_ns", "first_token_ns", "end_ns",
                                      "output_tokens", "prompt_tokens", "open_loop")


class RunStats:
    """The statistics of one run, accumulated record by record (see the module docstring).

    A usual record (measured, ended well, with a first token, two or more output tokens, a
    send time and a prompt count, no SLO to check) is kept as a tuple of its seven numbers and
    folded with the others ``_BATCH`` at a time by numpy: ~1 us a record less (3.3 -> 2.1-2.7 in
    a loop on the dev box, the ITL gaps' C call included), where the statistics were ~9% of the
    client's CPU at its ceiling on the 16-core host. Any other record folds the batch first, so
    every column keeps the records' order and every figure is the one record-by-record adding
    gives, bit for bit (a test holds the two equal)."""

    _METRICS = ("ttft", "tpot", "e2e", "send_lag")
    _BATCH = 512
    _FAST = True  # False: every record the one-by-one way (the tests' reference)

    def __init__(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES,
                 slo: dict[str, float] | None = None, itl_cap: int = ITL_EXACT_MAX) -> None:
        self.percentiles, self.slo = tuple(percentiles), slo
        self.cols = {m: array("f") for m in self._METRICS}
        self.itl = ItlPool(itl_cap)
        self.total = self.completed = self.warmup = self.good = 0
        self.errors: Counter[str] = Counter()
        self.error_examples: dict[str, str] = {}
        self.out_tokens = self.in_tokens = 0
        self.output_source: Counter[str] = Counter()
        self.loops: Counter[str] = Counter()
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.steady = SteadyWindow()
        self._batch: list[tuple[int, ...]] = []
        self._sources: list[str] = []

    def add(self, r: RequestRecord, gaps: Gaps | None = None) -> None:
        """One finished record; ``gaps``: its ITL gaps where the caller read them without its
        token times (``ItlPool.add_gaps``; ``r.chunk_ns`` is then empty). The latency
        definitions of ``origin_ns``, ``send_lag_ms``, ``ttft_ms``, ``tpot_ms`` and ``e2e_ms``
        are written out inline here and in ``_fold`` (a test holds them equal): the calls cost
        ~0.7 us of the ~3.4 this took per record at the client's ceiling."""
        out = r.output_tokens
        if (self._FAST and gaps is None and out is not None and out >= 2 and not r.warmup
                and r.error_kind is None and r.end_ns is not None and r.sent_ns
                and r.first_token_ns is not None and r.prompt_tokens is not None
                and not self.slo):
            batch = self._batch
            batch.append(_batched_fields(r))
            self._sources.append(r.output_tokens_source)
            self.total += 1
            self.completed += 1
            self.itl.add_times(r.chunk_ns)
            if len(batch) >= self._BATCH:
                self._fold()
            return
        self._fold()  # the columns keep the records' order
        if r.warmup:
            self.warmup += 1
            self.steady.add_warmup(r)
            return
        self.total += 1
        open_loop, sent, end = r.open_loop, r.sent_ns, r.end_ns
        self.loops["scheduled" if open_loop else "sent"] += 1
        if sent:
            self.cols["send_lag"].append((sent - r.scheduled_ns) / _NS_PER_MS)
        start = r.scheduled_ns if open_loop or not sent else sent
        if self.first_ns is None or start < self.first_ns:
            self.first_ns = start
        if end is not None and (self.last_ns is None or end > self.last_ns):
            self.last_ns = end
        self.steady.add_measured(r, start)
        if r.error_kind is not None or end is None:
            kind = r.error_kind or "incomplete"
            self.errors[kind] += 1
            if kind not in self.error_examples:
                self.error_examples[kind] = (r.error or "")[:_ERROR_EXAMPLE_MAX]
            return
        self.completed += 1
        cols, first, out = self.cols, r.first_token_ns, r.output_tokens
        if first is not None:
            cols["ttft"].append((first - start) / _NS_PER_MS)
            if out and out >= 2:
                cols["tpot"].append((end - first) / _NS_PER_MS / (out - 1))
        cols["e2e"].append((end - start) / _NS_PER_MS)
        if gaps is None:
            self.itl.add_times(r.chunk_ns)
        else:
            self.itl.add_gaps(gaps)
        self.out_tokens += out or 0
        self.in_tokens += r.prompt_tokens or 0
        self.output_source[r.output_tokens_source] += 1
        if self.slo and meets_slo(r, self.slo, None if gaps is None else gaps[4]):
            self.good += 1

    def _fold(self) -> None:
        """The batched records into the columns, counts and steady window, in their order:
        what ``add``'s one-by-one way does to each, as arrays."""
        batch = self._batch
        if not batch:
            return
        self._batch = []
        sources, self._sources = self._sources, []
        numbers = np.fromiter(itertools.chain.from_iterable(batch), dtype=np.int64,
                              count=7 * len(batch))  # (np.array of the tuples: 1.4x longer)
        scheduled, sent, first, end, out, prompt, open_loop = numbers.reshape(-1, 7).T
        opened = open_loop != 0
        start = np.where(opened, scheduled, sent)
        cols = self.cols
        for metric, values in (("send_lag", (sent - scheduled) / _NS_PER_MS),
                               ("ttft", (first - start) / _NS_PER_MS),
                               ("tpot", (end - first) / _NS_PER_MS / (out - 1)),
                               ("e2e", (end - start) / _NS_PER_MS)):
            cols[metric].frombytes(values.astype(np.float32).tobytes())
        n_open = int(np.count_nonzero(opened))
        for loop, n in (("scheduled", n_open), ("sent", len(batch) - n_open)):
            if n:
                self.loops[loop] += n
        lo, hi = int(start.min()), int(end.max())
        if self.first_ns is None or lo < self.first_ns:
            self.first_ns = lo
        if self.last_ns is None or hi > self.last_ns:
            self.last_ns = hi
        self.steady.add_measured_batch(start, sent, end, out, prompt)
        self.out_tokens += int(out.sum())
        self.in_tokens += int(prompt.sum())
        self.output_source.update(sources)

    def merge(self, other: RunStats, shift_ns: int = 0) -> None:
        """Another run's statistics added to these: a worker's share of this run, its times
        moved ``shift_ns`` earlier onto this run's clock (as ``clocks.shift_record`` moves its
        records). The summary is the one ``add`` of every record would give: the same values
        and counts (percentiles exact, the ITL histogram's bins too), sums in another order."""
        self._fold()
        other._fold()
        for metric in self._METRICS:
            self.cols[metric].extend(other.cols[metric])
        self.itl.merge(other.itl)
        self.total += other.total
        self.completed += other.completed
        self.warmup += other.warmup
        self.good += other.good
        self.errors.update(other.errors)
        for kind, example in other.error_examples.items():
            self.error_examples.setdefault(kind, example)
        self.out_tokens += other.out_tokens
        self.in_tokens += other.in_tokens
        self.output_source.update(other.output_source)
        self.loops.update(other.loops)
        if other.first_ns is not None:
            first = other.first_ns - shift_ns
            self.first_ns = first if self.first_ns is None else min(self.first_ns, first)
        if other.last_ns is not None:
            last = other.last_ns - shift_ns
            self.last_ns = last if self.last_ns is None else max(self.last_ns, last)
        self.steady.merge(other.steady, shift_ns)

    def span_s(self) -> float | None:
        """From the earliest latency origin to the latest end among the measured requests: in a
        closed loop from the first *send*, so the client's start-up is not counted as traffic."""
        self._fold()
        if self.first_ns is None or self.last_ns is None:
            return None
        return (self.last_ns - self.first_ns) / 1e9

    def values_ms(self, metric: str) -> np.ndarray:
        self._fold()
        return np.frombuffer(self.cols[metric], dtype=np.float32)

    def summary(self, duration_s: float | None = None) -> dict[str, Any]:
        """The run's figures. Throughput is the steady window's (``SteadyWindow``) when the
        run has one and no ``duration_s`` is given; the overall rate (first origin to last end,
        the drain included) is kept beside it as ``throughput.overall``."""
        self._fold()
        explicit = duration_s is not None
        if duration_s is None:
            duration_s = self.span_s()
        per_s = (lambda x: x / duration_s) if duration_s else (lambda x: None)
        overall = {"requests_per_s": per_s(self.completed),
                   "output_tokens_per_s": per_s(self.out_tokens),
                   "total_tokens_per_s": per_s(self.out_tokens + self.in_tokens),
                   "window_s": duration_s,
                   "window": "given" if explicit else "first send to last end (with the drain)"}
        steady = None if explicit else self.steady.throughput()
        pct = self.percentiles
        summary: dict[str, Any] = {
            "requests": {"total": self.total, "completed": self.completed,
                         "failed": self.total - self.completed, "warmup_excluded": self.warmup},
            "errors": dict(self.errors),
            "error_examples": dict(self.error_examples),
            "duration_s": duration_s,
            "latency_origin": "+".join(sorted(self.loops)) or None,
            "throughput": {**(steady or overall), "overall": overall},
            "tokens": {"input_total": self.in_tokens, "output_total": self.out_tokens,
                       "output_source": dict(self.output_source)},
            "ttft_ms": distribution(self.values_ms("ttft"), pct),
            "tpot_ms": distribution(self.values_ms("tpot"), pct),
            "itl_ms": self.itl.distribution(pct),
            "e2e_ms": distribution(self.values_ms("e2e"), pct),
            "send_lag_ms": distribution(self.values_ms("send_lag"), pct),
            "percentiles": list(pct),
        }
        if self.slo:
            summary["goodput"] = {"slo_ms": dict(self.slo), "good_requests": self.good,
                                  "requests_per_s": per_s(self.good),
                                  "attainment": self.good / self.total if self.total else None}
        return summary



def summarize(records: Iterable[RequestRecord], *,
              percentiles: Sequence[float] = DEFAULT_PERCENTILES,
              slo: dict[str, float] | None = None,
              duration_s: float | None = None) -> dict[str, Any]:
    """Summary of the measured (non-warm-up) requests.

    ``duration_s`` is the measurement window used for rates; when omitted it is the span from the
    earliest latency origin (see ``origin_ns``) to the latest end among the measured requests.
    """
    stats = RunStats(percentiles, slo)
    for r in records:
        stats.add(r)
    return stats.summary(duration_s)
