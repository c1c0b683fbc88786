#!/usr/bin/env bash
# The test command: install latscope with the local vLLM target and test extras, then run every test
# (unit tests on the real fixtures in ../shared/fixtures, integration tests against a real local vLLM).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
exec "${PYTHON:-python3}" -m pytest -q "$@"
