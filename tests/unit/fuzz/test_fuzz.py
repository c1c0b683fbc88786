"""Fuzz tests, one per reader (targets and invariants in fuzztargets.py): brief here (the
example count comes from $LATSCOPE_FUZZ_EXAMPLES, default 60), longer in benchmarks/fuzz.py.
Examples are derandomized (the same ones on every run, so CI is reproducible) and failures are
not shrunk unless $LATSCOPE_FUZZ_SHRINK=1: shrinking a large trace can take minutes."""

from __future__ import annotations

import os

import pytest
from fuzztargets import TARGETS
from hypothesis import HealthCheck, Phase, given, settings

EXAMPLES = int(os.environ.get("LATSCOPE_FUZZ_EXAMPLES", "60"))
PHASES = [Phase.explicit, Phase.reuse, Phase.generate] + (
    [Phase.shrink] if os.environ.get("LATSCOPE_FUZZ_SHRINK") == "1" else [])


def _fuzz_test(target):
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=PHASES,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(target.strategy)
    def run(value):
        target.check(value)

    return run


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_fuzz(target):
    _fuzz_test(target)()


@pytest.mark.slow
def test_quick_stream_readers_over_more_examples():
    # the client's hot path (the C pass, and the pure-Python reader where it is not built) is
    # held to the exact reader over more bodies than the other targets get: ~3 s for 1,000
    from fuzztargets import chunked_reads, sse_chunked

    @settings(max_examples=max(EXAMPLES, 1000), deadline=None, database=None, derandomize=True,
              phases=PHASES, suppress_health_check=[HealthCheck.too_slow])
    @given(chunked_reads())
    def run(reads):
        sse_chunked(reads)

    run()
