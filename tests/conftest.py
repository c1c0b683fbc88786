"""Shared test fixtures: where the real fixtures live.

Looked for in ``$LATSCOPE_FIXTURES`` when it is set (and only there: an explicit setting is never
silently replaced), else in ``../shared/fixtures`` beside the repo. Tests
that need them skip, with one line saying how to get them, on a clone that has neither: the trace
fixtures are public files that ``scripts/fetch-fixtures.sh`` downloads and checks (sources and
pinned commits in its manifest); the vLLM server recordings under ``vllm/`` are the project's own.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
SHIMS = REPO / "tests" / "shims"

# Test this checkout's code, also in the `python -m latscope` subprocesses some tests start, even
# when the installed (editable) latscope points at another checkout.
_paths = [str(REPO / "src")]
# Where rfc3987-syntax is installed (Jupyter's jsonschema extra), every process of the session,
# this one, each vLLM, Ray node and CLI it starts, sees it absent: its import alone took ~10 s of
# every vLLM start (tests/shims/rfc3987_syntax says what was measured)
if importlib.util.find_spec("rfc3987_syntax") is not None:
    _paths.insert(0, str(SHIMS))
    sys.path.insert(0, str(SHIMS))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (*_paths, os.environ.get("PYTHONPATH", "")) if p)

# The Ctrl-C tests send SIGINT to `python -m latscope` subprocesses. A suite started in the
# background by a script (`nohup .ci/run &`) inherits SIGINT ignored, and so would those
# subprocesses: they ran to the end and exited 0 (4 tests failed so). Python's own handler here
# makes them start with the default disposition, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_HOW = {
    "traces": "run `bash scripts/fetch-fixtures.sh DIR` (public traces, sha256-checked), then "
              "set LATSCOPE_FIXTURES=DIR",
    "vllm": "set LATSCOPE_FIXTURES to a copy of the project's fixtures folder (the vLLM "
            "recordings are not published)",
}


def fixture_root() -> Path:
    return Path(os.environ.get("LATSCOPE_FIXTURES") or SHARED_FIXTURES)


def _need(part: str) -> Path:
    root = fixture_root()
    if not (root / part).is_dir():
        pytest.skip(f"real fixtures not found ({root / part} is no folder): {_HOW[part]}")
    return root


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The fixtures root; the tests that use it read the vLLM recordings under vllm/."""
    return _need("vllm")


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real trace files (fixtures root / traces)."""
    return _need("traces") / "traces"



INTEGRATION_DIR = REPO / "tests" / "integration"


# the lane of the integration tests that run beside the unit tests, one at a time
UNTIMED_LANE = "untimed-integration"


# first: xdist's own hook reads the lane (``xdist_group``) into the test ids after this one
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/integration is ``slow`` and ``serial``: each starts or shares a
    real vLLM, a Ray cluster or Chromium (a vLLM start alone is 30-60 s on 2 cores), and several
    time a real server or conclude a verdict that a busy CPU changes (a host busy with other
    work is named first, by design). So ``-m "not slow"`` is the inner loop's fast subset
    (CONTRIBUTING.md), scripts/test.sh runs them after the unit tests, alone, and a new
    integration test needs no marker for either.

    But one marked ``untimed`` (it asserts what its processes did, never a timing or a verdict:
    tune's restarts, the target's crash and signals, Ray, Chromium) is not ``serial``: it runs
    in the unit phase, beside the unit tests, in a lane of its own (an ``xdist_group``: one at
    a time, its servers never two tests' at once). A vLLM start is one core busy for ~30 s (two
    processes' imports) and the unit tests left 29% of a 2-core box idle (#52)."""
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.slow)
            if item.get_closest_marker("untimed") is None:
                item.add_marker(pytest.mark.serial)
            else:
                item.add_marker(pytest.mark.xdist_group(UNTIMED_LANE))
