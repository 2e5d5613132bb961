#!/usr/bin/env bash
# Downloads into .whl/ (git-ignored) the wheels that scripts/gpu_run.sh's test stage
# needs and the lent GPU machine lacks (it cannot reach PyPI): the test tools, and
# import-linter and libcst, without which tests/test_layers.py and the converter's
# tests fail there. For the machine's Python (3.12 on the lent H100s and H200s).
#
#   bash scripts/gpu_wheels.sh          # then carry .whl to the machine
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-.venv/bin/pip}
mkdir -p .whl
$PIP download -q --disable-pip-version-check --only-binary=:all: \
  --python-version "${GPU_PYTHON_VERSION:-3.12}" -d .whl \
  pytest pytest-timeout pytest-xdist expecttest hypothesis import-linter libcst
ls .whl
