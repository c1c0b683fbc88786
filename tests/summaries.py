"""A load run's typed summary (``runfiles.BenchSummary``) with only the figures a test names,
the rest as a run with one completed request: for stand-ins of an observation."""

from __future__ import annotations

from typing import Any

from latscope.runfiles import BenchSummary, summary_of


def bench_summary(*, throughput: dict[str, Any] | None = None, **sections: Any) -> BenchSummary:
    rates = {"requests_per_s": None, "output_tokens_per_s": None, "total_tokens_per_s": None,
             **(throughput or {})}
    return summary_of({"requests": {"total": 1, "completed": 1, "failed": 0},
                       "throughput": rates, "tokens": {"input_total": 1, "output_total": 1},
                       **sections})
