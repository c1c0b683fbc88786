#!/usr/bin/env bash
# The test command: install latscope with the local vLLM target and test extras, then run every test
# (unit tests on the real fixtures in ../shared/fixtures, integration tests against a real local vLLM).
#
# With no arguments: ruff and mypy over src/, then two phases: the unit tests spread over the
# cores with pytest-xdist, and beside them, one at a time in a lane of their own, the
# integration tests marked `untimed` (they assert what their processes did, never a timing:
# tune's restarts, the target's crash and signals, Ray, Chromium); then the `serial` tests one at
# a time, nothing beside them (every other integration test, which start or share real vLLM
# servers and conclude verdicts a busy CPU changes, and the unit tests that hold measured timing
# to a known truth). The exit code is the first failing phase's, else 0. With arguments, one
# plain pytest run with them (`bash scripts/test.sh -m "not slow"`,
# `bash scripts/test.sh tests/unit/gateway -x`).
# LATSCOPE_TEST_WORKERS=N sets the first phase's workers (default: one per core, and one for the
# untimed lane; 0: no xdist).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Bytecode is written (into the checkout's __pycache__, git-ignored) even where the environment
# says not to (PYTHONDONTWRITEBYTECODE, as container images often set): otherwise every pytest
# process rewrites every test module's asserts again (12.6 s a collection, 8.0 s with the cache,
# four collections a run) and every `python -m latscope` the tests start compiles latscope again
unset PYTHONDONTWRITEBYTECODE
bash scripts/install.sh test
[ $# -eq 0 ] || exec "$PY" -m pytest -q "$@"

workers=${LATSCOPE_TEST_WORKERS:-$(( $(nproc 2>/dev/null || echo 1) + 1 ))}
# loadgroup: the untimed lane (one xdist_group) stays on one worker, each unit test goes where
# there is room; the lane is listed first so that it starts first (it is the longest item)
parallel=(-n "$workers" --dist loadgroup)
[ "$workers" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null || parallel=()

"$PY" -m ruff check src  # lint first: a second, quiet and cheap
# then types: src/latscope, pyproject's [tool.mypy]. Its cache is kept beside the tiny model's,
# not in the checkout: 18 s cold, under 1 s for the next clone (mypy checks each file's hash)
"$PY" -m mypy --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/latscope/mypy"
start=$(date +%s)
set +e
"$PY" -m pytest -q "${parallel[@]}" -m "not serial" tests/integration tests/unit
unit_rc=$?
echo "phase 1 (unit and untimed integration tests, ${workers} workers): exit ${unit_rc} in" \
  "$(( $(date +%s) - start )) s; phase 2: the serial tests"
# Only the files that hold serial tests are collected (8-13 s for all 1,500 tests, 2 s these):
# every integration test (conftest marks them) and the unit files that say `mark.serial`.
# The 20 slowest serial tests are printed (#22 tracks the suite's time); the summary stays the
# run's last line (CI reads it)
mapfile -t serial_units < <(grep -rl --include='test_*.py' 'mark\.serial' tests/unit | sort)
"$PY" -m pytest -q -m serial --durations=20 "${serial_units[@]}" tests/integration
serial_rc=$?
set -e
[ "$unit_rc" -ne 0 ] && exit "$unit_rc"
exit "$serial_rc"
