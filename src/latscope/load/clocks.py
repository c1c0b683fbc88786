"""A worker's clock against the driver's: an NTP-style ping exchange, and records moved onto
the driver's clock."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from latscope.model import RequestRecord

_PINGS = 15
_TIME_FIELDS = ("scheduled_ns", "sent_ns", "headers_ns", "first_token_ns", "end_ns")


@dataclass
class ClockOffset:
    offset_ns: int  # worker clock minus driver clock, as measured
    bound_ns: int  # |true offset - offset_ns| <= bound_ns
    pings: int
    # what is subtracted from the worker's timestamps: 0 on the driver's own kernel, where
    # CLOCK_MONOTONIC is one clock and the measured offset is only the exchange's noise
    applied_ns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"offset_ns": self.offset_ns, "bound_ns": self.bound_ns, "pings": self.pings,
                "applied_ns": self.applied_ns}


def measure_offset(ping: Callable[[], int], pings: int = _PINGS) -> ClockOffset:
    """NTP-style: the exchange with the shortest round trip bounds the offset best."""
    best: tuple[int, int] | None = None
    for _ in range(pings):
        t0 = time.perf_counter_ns()
        tw = ping()
        t1 = time.perf_counter_ns()
        rtt = t1 - t0
        if best is None or rtt < best[1]:
            best = (tw - (t0 + t1) // 2, rtt)
    assert best is not None
    return ClockOffset(best[0], (best[1] + 1) // 2, pings)


def shift_record(record: RequestRecord, offset_ns: int) -> RequestRecord:
    """A worker's record moved onto the driver's clock."""
    if offset_ns:
        for name in _TIME_FIELDS:
            value = getattr(record, name)
            if value:
                setattr(record, name, value - offset_ns)
        record.chunk_ns = [t - offset_ns for t in record.chunk_ns]
    return record
