#!/usr/bin/env bash
# The main job: set up, then train a CNN and a transformer on musa:0 next to the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python examples/train_musa.py "$@"
