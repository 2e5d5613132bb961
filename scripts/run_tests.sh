#!/usr/bin/env bash
# Set up, then run the test suite on every core (pytest-xdist; at most 8 workers, or
# TEST_WORKERS). --dist loadfile keeps each test file in one worker: the files whose
# tests share a costly setup (a C++ build, one multi-process launch for many checks)
# pay it once. Arguments go to pytest: -m "not slow" is the inner loop (docs/DEVELOPING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
cores=$(nproc 2>/dev/null || echo 2)
workers=${TEST_WORKERS:-$(( cores < 8 ? cores : 8 ))}
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadfile "$@"
