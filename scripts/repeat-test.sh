#!/usr/bin/env bash
# Repeat chosen tests N times in a row, each run a fresh pytest (session fixtures, servers and
# all, started anew), to hunt a flake: prints one line per run and a tally, keeps every run's
# output, and exits non-zero if any run failed.
#
#   bash scripts/repeat-test.sh N TEST... [-- PYTEST-ARGS...]
#   bash scripts/repeat-test.sh 5 tests/integration/test_target.py::test_constrained_target_caps_the_batch_and_logs_requests
#   LATSCOPE_BUSY_CORES=1 bash scripts/repeat-test.sh 3 tests/integration/test_observe_vllm.py
#
# LATSCOPE_BUSY_CORES=K keeps K extra processes spinning for the whole hunt, as a slower or busier
# machine would be (they are stopped, by their PIDs, when the script ends). Outputs go to
# $LATSCOPE_REPEAT_DIR (default: a new folder under /tmp), one file per run.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

usage() { echo "usage: bash scripts/repeat-test.sh N TEST... [-- PYTEST-ARGS...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
runs=$1; shift
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "error: N must be a positive integer, not '$runs'" >&2; exit 2; }
tests=(); extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  tests+=("$1"); shift
done
[ ${#tests[@]} -gt 0 ] || usage

out_dir=${LATSCOPE_REPEAT_DIR:-$(mktemp -d /tmp/latscope-repeat.XXXXXX)}
mkdir -p "$out_dir"
busy=()
stop_busy() { for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null; done; }
trap stop_busy EXIT
for _ in $(seq 1 "${LATSCOPE_BUSY_CORES:-0}"); do
  "$PY" -c 'while True: pass' & busy+=("$!")
done
[ ${#busy[@]} -eq 0 ] || echo "busy processes on the side: ${busy[*]}"

failed=0
for i in $(seq 1 "$runs"); do
  log="$out_dir/run-$i.txt"
  start=$(date +%s)
  "$PY" -m pytest -q -p no:cacheprovider "${extra[@]}" "${tests[@]}" >"$log" 2>&1
  rc=$?
  summary=$(grep -E '(passed|failed|error|skipped|no tests ran)' "$log" | tail -1)
  echo "run $i/$runs: exit $rc in $(( $(date +%s) - start )) s: ${summary:-no summary} ($log)"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
done
echo "$((runs - failed)) of $runs runs passed; outputs in $out_dir"
[ "$failed" -eq 0 ]
