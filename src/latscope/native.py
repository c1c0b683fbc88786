"""The one door to latscope's optional C part (``src/latscope/_native.c``, built by setup.py
where a compiler is found): whether it is there is decided once, here, and every caller takes
its functions from this module, never from ``_native``. Where it was not built (or
``LATSCOPE_NATIVE=python`` is set: a suspected C bug, or a measurement of what the C buys) the
pure-Python twins answer the same (``latscope.twins``, ``latscope.fastread``). ``BACKEND`` says
which ("c" or "python": ``summary.json`` -> ``client.stream_parser``); ``BACKENDS`` holds both
sets, for the tests that hold each C function to its twin.

What the C part holds, and what each function buys (docs/bench.md has the runs):

- ``scan_stream``: a finished stream read in one pass (framing, SSE events, token times):
  ~15 us a 64 KB response against the twin's ~250-400;
- ``GapStore``: a run's ITL gaps, added from each request's token times in one call (numpy's
  per-call overhead was ~9 us a request);
- ``record_line``: a record's ``requests.jsonl`` line (orjson's dataclass path took ~4.6 us of
  a response at the client's ceiling);
- ``json_gaps``: a line's token times read where they lie, as ITL gaps, without a Python int
  per time: every pass that reads a run back (the decomposition, a rebuilt summary, a dead
  worker's records) took 4.2x the CPU with its twin.

Dropped after measuring (docs/bench.md, "The C behind one door"): ``gaps_ms`` (no caller but
tests), ``last_int`` and ``usual_head`` (~1.5 us a response between them, which no real run
showed: the client's CPU per token moved +0.011 +/- 0.064 and +0.000 +/- 0.048 us with them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from latscope import fastread, twins

try:
    from latscope import _native as _c
except ImportError:  # pragma: no cover - exercised where no compiler was found
    _c = None  # type: ignore[assignment]

Gaps = twins.Gaps
Scan = Callable[[list[tuple[int, bytes]], int], "tuple[list[int], bytes] | None"]


@dataclass(frozen=True)
class Backend:
    """One set of the functions: the C part's or the twins'."""

    name: str
    scan_stream: Scan
    GapStore: Callable[[int], Any]
    record_line: Callable[..., bytes | None]
    json_gaps: Callable[..., tuple[int, int, Gaps | None] | None]


PYTHON = Backend("python", fastread.scan_stream, twins.GapStore, twins.record_line,
                 twins.json_gaps)
C = (Backend("c", _c.scan_stream, _c.GapStore, _c.record_line, _c.json_gaps)
     if _c is not None else None)
BACKENDS = {"python": PYTHON, **({"c": C} if C is not None else {})}

_chosen = C if C is not None and os.environ.get("LATSCOPE_NATIVE", "") != "python" else PYTHON
BACKEND = _chosen.name
scan_stream = _chosen.scan_stream
GapStore = _chosen.GapStore
record_line = _chosen.record_line
json_gaps = _chosen.json_gaps
