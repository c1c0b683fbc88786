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

import heapq
import itertools
import math
import operator
from array import array
from collections import Counter
from typing import Any, Iterable, Sequence

import numpy as np

from latscope.model import RequestRecord

try:  # the C gaps (setup.py builds latscope/_native.c where a compiler is found)
    from latscope import _native
except ImportError:  # pragma: no cover - exercised where no compiler is found
    _native = None  # type: ignore[assignment]

# One request's ITL gaps: float32 values (ms) as bytes, then their float64 sum, sum of squares,
# min and max (``_native.gaps_ms`` of its token times, ``_native.json_gaps`` of its line)
Gaps = tuple[bytes, float, float, float, float]

DEFAULT_PERCENTILES = (50, 90, 95, 99)
SLO_KEYS = ("ttft", "tpot", "itl", "e2e")
_NS_PER_MS = 1e6
# 256 KiB of float32 gaps (~500 requests of 128 tokens), then a histogram (~120 KiB): the ITL
# store stops growing there; at 1 << 22 it grew ~1 KB a request (255 gaps x 4 B) up to 16 MiB
ITL_EXACT_MAX = 1 << 16
_HIST_LO_MS, _HIST_STEP = 1e-4, 2e-3  # log bins: 0.1 us upwards, 0.2% wide (+-0.1% error)
_ERROR_EXAMPLE_MAX = 200


def distribution(values_ms: Sequence[float] | np.ndarray,
                 percentiles: Iterable[float] = DEFAULT_PERCENTILES) -> dict[str, Any]:
    """count, mean, std (population), min, max and the requested percentiles (linear interpolation,
    numpy's default, the same method as vllm bench serve) of one metric; ``None`` when empty."""
    arr = np.asarray(values_ms, dtype=np.float64)
    out: dict[str, Any] = {"count": int(arr.size)}
    if arr.size == 0:
        out.update(mean=None, std=None, min=None, max=None)
        out.update({_pkey(p): None for p in percentiles})
        return out
    out.update(mean=float(arr.mean()), std=float(arr.std()), min=float(arr.min()),
               max=float(arr.max()))
    values = np.percentile(arr, list(percentiles))
    out.update({_pkey(p): float(v) for p, v in zip(percentiles, values)})
    return out


def _pkey(p: float) -> str:
    return f"p{p:g}"


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


class _GapStorePy:
    """``_native.GapStore``'s pure-Python twin, where the C part is not built: the same values
    (``itls_ms``'s), sums and answers (tests hold the two equal)."""

    def __init__(self, cap: int) -> None:
        self.cap, self._values = cap, array("f")
        self.count, self.total, self.total_sq = 0, 0.0, 0.0
        self.lo, self.hi = math.inf, -math.inf

    @property
    def kept(self) -> int:
        return len(self._values)

    @property
    def nbytes(self) -> int:
        return len(self._values) * self._values.itemsize

    def add_times(self, times: list[int]) -> bool:
        if len(times) < 2:
            return True
        return self.add_gaps(gap_sums(np.diff(np.asarray(times, dtype=np.int64)) / _NS_PER_MS))

    def add_gaps(self, gaps: Gaps) -> bool:
        f32, total, total_sq, lo, hi = gaps
        if self.kept + len(f32) // 4 > self.cap:
            return False
        self._values.frombytes(f32)
        self.add_sums(len(f32) // 4, total, total_sq, lo, hi)
        return True

    def add_sums(self, count: int, total: float, total_sq: float, lo: float, hi: float) -> None:
        self.count += count
        self.total += total
        self.total_sq += total_sq
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)

    def values(self) -> bytes:
        return self._values.tobytes()

    def clear(self) -> None:
        self._values = array("f")


def gap_sums(gaps: np.ndarray) -> Gaps:
    """``gaps`` (ms) as ``_native.gaps_ms`` gives a request's: float32 values, float64 sum, sum
    of squares, min and max."""
    if not gaps.size:
        return b"", 0.0, 0.0, math.inf, -math.inf
    return (gaps.astype(np.float32).tobytes(), float(gaps.sum()), float(np.square(gaps).sum()),
            float(gaps.min()), float(gaps.max()))


class _Pooled:
    """One pooled metric (ITL): exact float32 values up to ``cap``, then a log histogram.

    Count, mean, std, min and max stay exact (running float64 sums); only percentiles of a
    folded metric carry the histogram's +-0.1% relative error, and the summary says so. Past
    the cap, gaps still wait in the store and are folded a cap-full at a time (numpy's
    per-call overhead paid once per 65k gaps, not once per request).
    """

    def __init__(self, cap: int, native: bool = True) -> None:
        self.store = (_native.GapStore(cap) if native and _native is not None
                      else _GapStorePy(cap))
        self.hist: np.ndarray | None = None
        self.zeros = 0  # exact zero gaps (chunks of one read) in the histogram

    def add_times(self, times: list[int]) -> None:
        """The gaps between one request's token times (ns), ``itls_ms``'s values: in one C
        call (numpy's per-call overhead was ~9 us a request, a tenth of the client's whole
        cost per response at full speed; gaps_ms and the Python around it ~2.8)."""
        if not self.store.add_times(times):  # full: fold what waits, then keep these
            self._fold_kept()
            if not self.store.add_times(times):  # one request past the whole cap
                self.extend(np.diff(np.asarray(times, dtype=np.int64)) / _NS_PER_MS)

    def add_gaps(self, gaps: Gaps) -> None:
        """One request's gaps as ``_native.gaps_ms`` gives them (float32 values, float64 sum,
        sum of squares, min, max): read from its requests.jsonl line (``_native.json_gaps``:
        a dead worker's records, counted from the file by the driver)."""
        if not self.store.add_gaps(gaps):
            self._fold_kept()
            if not self.store.add_gaps(gaps):
                self._fold_past_cap(np.frombuffer(gaps[0], dtype=np.float32), gaps)

    def extend(self, gaps: np.ndarray) -> None:
        """Gaps (ms) given as an array: kept like a request's, folded where past the cap."""
        if not gaps.size:
            return
        sums = gap_sums(gaps)
        if not self.store.add_gaps(sums):
            self._fold_kept()
            if not self.store.add_gaps(sums):
                self._fold_past_cap(gaps, sums)

    def merge(self, other: _Pooled) -> None:
        """Another run's gaps (a worker's share of this run): its histogram added, the values
        it still kept kept here (or folded), its sums added once."""
        if other.hist is not None:
            if self.hist is None:
                self.hist = np.zeros_like(other.hist)
            self.hist += other.hist
            self.zeros += other.zeros
        store = other.store
        self._take_in(store.values(), store.count, store.total, store.total_sq, store.lo,
                      store.hi)

    def _take_in(self, values: bytes, count: int, total: float, total_sq: float, lo: float,
                 hi: float) -> None:
        """``count`` gaps with these sums, of which ``values`` (float32) are the ones not
        folded yet: the values kept like a request's (counted by their number, no sums),
        then the rest of the count and every sum."""
        self.add_gaps((values, 0.0, 0.0, math.inf, -math.inf))
        self.store.add_sums(count - len(values) // 4, total, total_sq, lo, hi)

    def __getstate__(self) -> dict[str, Any]:
        """A worker's statistics go to the driver pickled; the C store as its values and sums."""
        store = self.store
        return {"cap": store.cap, "native": not isinstance(store, _GapStorePy),
                "hist": self.hist, "zeros": self.zeros,
                "gaps": (store.values(), store.count, store.total, store.total_sq, store.lo,
                         store.hi)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["cap"], state["native"])  # type: ignore[misc]
        self.hist, self.zeros = state["hist"], state["zeros"]
        self._take_in(*state["gaps"])

    def _fold_past_cap(self, gaps: np.ndarray, sums: Gaps) -> None:
        """One request's gaps, more than the store ever keeps: counted and folded at once."""
        self.store.add_sums(len(sums[0]) // 4, *sums[1:])
        self._fold(gaps.astype(np.float32).astype(np.float64))

    def _fold_kept(self) -> None:
        if self.store.kept:
            self._fold(np.frombuffer(self.store.values(), dtype=np.float32).astype(np.float64))
            self.store.clear()

    def _fold(self, gaps: np.ndarray) -> None:
        if self.hist is None:
            self.hist = np.zeros(_bin(np.float64(1e9)) + 2, dtype=np.int64)
        positive = gaps[gaps > 0]
        self.zeros += int(gaps.size - positive.size)
        np.add.at(self.hist, np.minimum(_bin(positive), self.hist.size - 1), 1)

    def nbytes(self) -> int:
        """Bytes of gap storage held (exact values or histogram): bounded whatever the count."""
        return int(self.store.nbytes) + (0 if self.hist is None else self.hist.nbytes)

    def distribution(self, percentiles: Sequence[float]) -> dict[str, Any]:
        if self.hist is None:
            return distribution(np.frombuffer(self.store.values(), dtype=np.float32),
                                percentiles)
        self._fold_kept()  # the gaps still waiting, so that every percentile counts them
        s = self.store
        mean = s.total / s.count
        out: dict[str, Any] = {"count": s.count, "mean": mean,
                               "std": math.sqrt(max(s.total_sq / s.count - mean * mean, 0.0)),
                               "min": s.lo, "max": s.hi}
        cum = np.cumsum(self.hist) + self.zeros
        for p in percentiles:
            rank = p / 100 * (s.count - 1)  # numpy's linear rank between two order statistics
            lo, hi = self._at(cum, math.floor(rank)), self._at(cum, math.ceil(rank))
            out[_pkey(p)] = lo + (hi - lo) * (rank - math.floor(rank))
        out["percentile_rel_error"] = _HIST_STEP / 2
        return out

    def _at(self, cum: np.ndarray, k: int) -> float:
        """The k-th smallest value (0-based), to within half a bin: its bin's geometric middle."""
        if k < self.zeros:
            return 0.0
        b = int(np.searchsorted(cum, k, side="right"))
        mid = _HIST_LO_MS * (1 + _HIST_STEP) ** (b + 0.5)
        return float(min(max(mid, self.store.lo), self.store.hi))


def _bin(v: np.ndarray | np.float64) -> np.ndarray:
    return np.maximum(np.floor(np.log(v / _HIST_LO_MS) / math.log1p(_HIST_STEP)), 0).astype(
        np.int64)


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
        self.itl = _Pooled(itl_cap)
        self.total = self.completed = self.warmup = self.good = 0
        self.errors: Counter[str] = Counter()
        self.error_examples: dict[str, str] = {}
        self.out_tokens = self.in_tokens = 0
        self.output_source: Counter[str] = Counter()
        self.loops: Counter[str] = Counter()
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.steady = _SteadyWindow()
        self._batch: list[tuple[int, ...]] = []
        self._sources: list[str] = []

    def add(self, r: RequestRecord, gaps: Gaps | None = None) -> None:
        """One finished record; ``gaps``: its ITL gaps where the caller read them without its
        token times (``_Pooled.add_gaps``; ``r.chunk_ns`` is then empty). The latency
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
        self.steady.add_measured_batch(start, end, out, prompt)
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
        """The run's figures. Throughput is the steady window's (``_SteadyWindow``) when the
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


class _SteadyWindow:
    """A step's steady throughput: completions that ended between the first measured send and
    the last send (latency origins), over that window, so the drain after the last send (fewer
    requests in flight, e.g. 14.4 -> 10.8 req/s on a --max-num-seqs 16 server) is not counted.

    Warm-up completions that end inside the window count too: in a closed loop whose warm-up
    flows into the measured requests, every send in the window follows a completion, so the
    window's completion rate equals its send rate; counting only measured ones would miss the
    ``concurrency - 1`` warm-up requests that end in it. Memory stays bounded: measured
    completions are summed as soon as they end before the latest send seen, and a heap keeps
    only those that ended after it (about what is in flight); warm-up ends are kept (there are
    only ``warmup`` of them).
    """

    MIN_COMPLETIONS = 2  # fewer in the window: no steady state to speak of

    def __init__(self) -> None:
        self.first = self.last = None  # type: int | None
        self.settled = [0, 0, 0]  # completions, output tokens, input tokens
        self.pending: list[tuple[int, int, int]] = []  # heap of (end, out, in) after ``last``
        self.warm: list[tuple[int, int, int]] = []

    @staticmethod
    def _entry(r: RequestRecord) -> tuple[int, int, int] | None:
        if not r.ok or r.end_ns is None:
            return None
        return r.end_ns, r.output_tokens or 0, r.prompt_tokens or 0

    def add_warmup(self, r: RequestRecord) -> None:
        if (entry := self._entry(r)) is not None:
            self.warm.append(entry)

    def add_measured(self, r: RequestRecord, origin: int) -> None:
        # (_entry and _settle written out: once per record at the client's ceiling)
        last = self.last
        if self.first is None or origin < self.first:
            self.first = origin
        if last is None or origin > last:
            self.last = last = origin
            pending = self.pending
            while pending and pending[0][0] <= origin:
                self._settle(heapq.heappop(pending))
        end = r.end_ns
        if end is None or r.error_kind is not None:  # not r.ok
            return
        if end <= last:
            settled = self.settled
            settled[0] += 1
            settled[1] += r.output_tokens or 0
            settled[2] += r.prompt_tokens or 0
        else:
            heapq.heappush(self.pending, (end, r.output_tokens or 0, r.prompt_tokens or 0))

    def add_measured_batch(self, origins: np.ndarray, ends: np.ndarray, outs: np.ndarray,
                           ins: np.ndarray) -> None:
        """Usual records (measured, ended well) at once, as ``add_measured`` of each in turn
        leaves the window: a completion is settled once it ended before the latest send, and
        which record brought that send does not matter (``merge`` relies on the same)."""
        lo, hi = int(origins.min()), int(origins.max())
        if self.first is None or lo < self.first:
            self.first = lo
        if self.last is None or hi > self.last:
            self.last = hi
            pending = self.pending
            while pending and pending[0][0] <= hi:
                self._settle(heapq.heappop(pending))
        now = ends <= self.last
        settled = self.settled
        settled[0] += int(np.count_nonzero(now))
        settled[1] += int(outs[now].sum())
        settled[2] += int(ins[now].sum())
        if not now.all():
            later = ~now
            for entry in zip(ends[later].tolist(), outs[later].tolist(), ins[later].tolist()):
                heapq.heappush(self.pending, entry)

    def merge(self, other: _SteadyWindow, shift_ns: int = 0) -> None:
        """Another window's completions, its times moved ``shift_ns`` earlier. A completion
        settles once it ended before the latest send seen, whichever record brought that send:
        the ones the other had settled ended before its latest, so before the merged one; its
        pending ones (and these) settle against the merged latest."""
        if other.first is not None:
            first = other.first - shift_ns
            self.first = first if self.first is None else min(self.first, first)
        self.settled = [a + b for a, b in zip(self.settled, other.settled)]
        self.warm += [(end - shift_ns, out, inp) for end, out, inp in other.warm]
        for end, out, inp in other.pending:
            heapq.heappush(self.pending, (end - shift_ns, out, inp))
        if other.last is not None:
            last = other.last - shift_ns
            self.last = last if self.last is None else max(self.last, last)
        while self.pending and self.last is not None and self.pending[0][0] <= self.last:
            self._settle(heapq.heappop(self.pending))

    def _settle(self, entry: tuple[int, int, int]) -> None:
        self.settled[0] += 1
        self.settled[1] += entry[1]
        self.settled[2] += entry[2]

    def throughput(self) -> dict[str, Any] | None:
        if self.first is None or self.last is None or self.last <= self.first:
            return None
        done, out, inp = self.settled  # every settled end lies in [first, last]: it is measured
        for end, o, i in self.warm:
            if self.first <= end <= self.last:
                done, out, inp = done + 1, out + o, inp + i
        if done < self.MIN_COMPLETIONS:
            return None
        window = (self.last - self.first) / 1e9
        return {"requests_per_s": done / window, "output_tokens_per_s": out / window,
                "total_tokens_per_s": (out + inp) / window, "window_s": window,
                "window": "steady: first measured send to last send", "window_requests": done}


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
