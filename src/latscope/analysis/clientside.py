"""The client's side of a decomposition, read one record at a time (``latscope.analysis.decompose``
is the rest): each record leaves a few floats, never itself, so a run of any length is
decomposed in memory that grows by bytes a request, not by its records and token times."""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import orjson

from latscope.analysis.join import PerRequestSplit, RequestSplit
from latscope.model import MetricSnapshot, RequestRecord
from latscope.stats import e2e_ms, latency_origin, ttft_ms


@dataclass(frozen=True, slots=True)
class RowStats:
    """One row's figures in ms, as its source gave them: a mean always (None: not measured),
    percentiles where the source has them, a histogram's bucket around each (its width as the
    error, its lower edge) where they are estimated from buckets."""

    mean_ms: float | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p50_error_ms: float | None = None
    p99_error_ms: float | None = None
    p50_lower_ms: float | None = None
    p99_lower_ms: float | None = None
    count: int | None = None


@dataclass(frozen=True, slots=True)
class ClientFigures:
    """The client's four figures of a run, each over its measured requests."""

    ttft: RowStats
    lag: RowStats  # origin -> send
    e2e: RowStats
    decode: RowStats


def client_stats(values: Iterable[float] | array) -> RowStats:
    arr = np.asarray(values, dtype=float)
    if not arr.size:
        return RowStats(None, count=0)
    p50, p99 = np.percentile(arr, [50, 99])
    return RowStats(float(arr.mean()), float(p50), float(p99), count=int(arr.size))


def per_request_server_timings(record: RequestRecord) -> dict[str, float] | None:
    """vLLM's per-request fields (``--enable-per-request-metrics``), in ms, if the record has them.

    Beware vLLM's naming: its ``time_to_first_token_ms`` is scheduled -> first token, i.e. the
    *prefill* interval, not TTFT from arrival (vllm/entrypoints/generate/base/serving.py,
    ``build_per_request_timing_metrics``); ``generation_time_ms`` is first -> last token.
    """
    server = record.server or {}
    metrics = server.get("metrics")
    m: dict[str, Any] = metrics if isinstance(metrics, dict) else server
    out = {}
    for ours, theirs in (("queue", "queue_time_ms"), ("prefill", "time_to_first_token_ms"),
                         ("decode", "generation_time_ms")):
        value = m.get(theirs)
        if isinstance(value, (int, float)):
            out[ours] = float(value)
    return out or None


def origin_to_send_ms(r: RequestRecord) -> float:
    """How long after its latency origin the request was sent: client TTFT minus the time from
    the send to the first chunk (0 where TTFT is timed from the send itself)."""
    ttft = ttft_ms(r)
    if ttft is None or r.first_token_ns is None or not r.sent_ns:
        return 0.0
    return max(0.0, ttft - (r.first_token_ns - r.sent_ns) / 1e6)


_PER_REQUEST_PARTS = ("queue", "prefill", "decode")


class ClientFold:
    """The client's side of a decomposition, folded one record at a time: each record leaves
    its four figures (TTFT, send delay, E2E, decode) and its per-request server timings, never
    itself (a run's records read back whole held ~9 kB each of token times: 863 MB at the end
    of a 50,000-request run, issue #52)."""

    def __init__(self) -> None:
        self.count = 0
        self.ttft, self.lag, self.e2e, self.decode = (array("d") for _ in range(4))
        self.per_req = {part: array("d") for part in _PER_REQUEST_PARTS}
        self.per_req_records = 0  # records with any per-request server timing
        self.origins: set[str] = set()

    def add(self, r: RequestRecord) -> None:
        """An ok record with a first token."""
        assert r.first_token_ns is not None and r.end_ns is not None
        self.count += 1
        self.ttft.append(ttft_ms(r) or 0.0)  # (set: the first token came)
        self.lag.append(origin_to_send_ms(r))
        self.e2e.append(e2e_ms(r) or 0.0)
        self.decode.append((r.end_ns - r.first_token_ns) / 1e6)
        self.origins.add(latency_origin(r.open_loop))
        timings = per_request_server_timings(r)
        if timings:
            self.per_req_records += 1
            for part, value in timings.items():
                self.per_req[part].append(value)

    def extend(self, other: ClientFold) -> None:
        self.count += other.count
        for mine, theirs in ((self.ttft, other.ttft), (self.lag, other.lag),
                             (self.e2e, other.e2e), (self.decode, other.decode)):
            mine.extend(theirs)
        for part in _PER_REQUEST_PARTS:
            self.per_req[part].extend(other.per_req[part])
        self.per_req_records += other.per_req_records
        self.origins |= other.origins

    def figures(self) -> ClientFigures:
        return ClientFigures(client_stats(self.ttft), client_stats(self.lag),
                             client_stats(self.e2e), client_stats(self.decode))


class Folds:
    """One pass over a run's records: the measured ones (ok, with a first token) and the
    warm-ups that finished inside the server's window, ``(first, last]``."""

    def __init__(self, first: MetricSnapshot | None, last: MetricSnapshot | None) -> None:
        self.measured, self.late = ClientFold(), ClientFold()
        self.window = (first.t_ns, last.t_ns) if first is not None and last is not None else None
        self.traced = False

    def add(self, r: RequestRecord) -> None:
        self.traced = self.traced or bool(r.trace_id)
        if not r.ok or r.first_token_ns is None:
            return
        if not r.warmup:
            self.measured.add(r)
        elif self.window is not None and self.window[0] < (r.end_ns or 0) <= self.window[1]:
            # a closed loop's warm-up (and stagger ramp) flows into its measured requests: the
            # first scrape is taken when the first measured request is sent, while up to
            # ``concurrency - 1`` warm-ups still run
            self.late.add(r)


class RowFile:
    """``per_request.json`` written as its rows come (the join keeps none of them): a temp
    file beside it, renamed into place by ``finish``, removed by ``close`` otherwise."""

    def __init__(self, path: Path) -> None:
        self.path, self.tmp = path, path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.file = open(self.tmp, "wb")
        self.file.write(b'{"rows":[')
        self.count = 0

    def add(self, row: RequestSplit) -> None:
        self.file.write((b",\n" if self.count else b"\n") + orjson.dumps(row))
        self.count += 1

    def finish(self, split: PerRequestSplit) -> None:
        rest = orjson.dumps(split.to_dict(rows=False), option=orjson.OPT_SERIALIZE_NUMPY)
        self.file.write(b"\n]," + rest[1:] + b"\n")  # the other keys after the rows
        self.file.close()
        self.tmp.replace(self.path)

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()
        self.tmp.unlink(missing_ok=True)
