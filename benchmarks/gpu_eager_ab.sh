#!/usr/bin/env bash
# One fix proven on a GPU host by diagnose restarting the server (docs/diagnose.md, "eager-proven"):
# `diagnose --serve-cmd` starts vLLM with --enforce-eager, sweeps c=1 and 16, and A/Bs the server
# with and without the flag, each run on a fresh server (A B A B), TPOT the metric, TTFT the guard.
#   benchmarks/gpu_eager_ab.sh MODEL OUT [DEADLINE_S]
# MODEL: a model directory vLLM serves (the H200 run: a Llama-3.1-8B-shaped config with
# --load-format dummy); OUT: where the run directory and its tarball go (the tarball leaves the raw
# profile out, as tests/data/gpu-matrix/ keeps them). DEADLINE_S (default 540) bounds the call: the
# budget is 95 s less (the first server start and the report), the whole command 20 s less.
set -euo pipefail
MODEL=$(realpath "$1") OUT=$2 D=${3:-540}
mkdir -p "$OUT/eager-proven"
cat > "$OUT/eager-proven/scenario.json" <<JSON
{"name": "eager-proven", "planted": "--enforce-eager, diagnose --serve-cmd: the fix A/B'd by restarts",
 "expect": {"kind": "cause", "finding": "server.enforce_eager"},
 "recorded": "$(date -u +%FT%TZ)"}
JSON
SERVE="$(command -v python3) -m vllm.entrypoints.cli.main serve $MODEL --load-format dummy \
--host 127.0.0.1 --port {port} --served-model-name llama8b --max-model-len 8192 --enforce-eager"
t0=$(date +%s)
rc=0
timeout -s TERM $((D - 20)) python3 -m latscope diagnose --serve-cmd "$SERVE" -o "$OUT/eager-proven" \
  --input-len 96..160 --output-len 32..96 -c 1,16 --budget $((D - 95))s --pairs 2 \
  > "$OUT/diagnose.out" 2>&1 || rc=$?
echo "rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/diagnose.out"
tar czf "$OUT/eager-proven.tgz" --exclude='*.pt.trace.json*' --exclude=report.html \
  -C "$OUT" eager-proven
exit $rc
