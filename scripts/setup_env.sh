#!/usr/bin/env bash
# Creates .venv, installs torch 2.13.0 (CPU) and the test tools, and builds
# torch_musa in editable mode. Re-running skips the install when nothing that
# affects it changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.torch_musa_stamp
# Everything the C++ build reads: packaging, the runtime core (with cuda/), the
# mccl kernels, and the operator registry with its code generator.
want=$(find pyproject.toml setup.py torch_musa/csrc torch_musa/distributed/csrc \
         torch_musa/ops/musa_functions.yaml torch_musa/ops/codegen.py -type f | sort \
       | xargs cat | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c "import torch_musa" 2>/dev/null; then
  echo "[setup] installing torch 2.13.0 and building torch_musa (first run: a few minutes)"
  # Build-time needs (no build isolation): torch, the build tools, PyYAML for the op codegen.
  .venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" setuptools wheel ninja pyyaml 2>&1 | grep -v "^WARNING: Location" || true
  # --no-build-isolation: the C++ core compiles against the torch just installed.
  .venv/bin/pip install -q --disable-pip-version-check --no-build-isolation -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c "import torch_musa" || { echo "[setup] torch_musa failed to build" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
