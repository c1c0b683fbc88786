"""The client side of latscope: workloads, arrival processes, the streaming client and the runner.

Public contract (used by ``sweep``, ``tune`` and the analyses)::

    from latscope.load import BenchConfig, run_bench, read_run
    result = run_bench(BenchConfig(url="http://127.0.0.1:8000", num_requests=20, concurrency=4))
    result.run_dir, result.records, result.summary
"""

from __future__ import annotations

from latscope.load.config import BenchConfig, LengthDist, MixEntry, WorkloadSpec
from latscope.load.runner import BenchResult, arun_bench, run_bench
from latscope.rundir import read_run

__all__ = ["BenchConfig", "BenchResult", "LengthDist", "MixEntry", "WorkloadSpec", "arun_bench",
           "read_run", "run_bench"]
