#!/usr/bin/env bash
# Install mnemoscope with every extra into ./.venv and run the test suite.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MNEMOSCOPE_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
# CPU torch first, from the pinned build, so sentence-transformers does not pull a CUDA one.
"$PY" -m pip install -q "torch==2.13.0"
"$PY" -m pip install -q -e ".[dev]"
"$VENV/bin/ruff" check src tests bench
"$VENV/bin/ruff" format --check src tests bench
"$VENV/bin/mypy"
"$PY" -m pytest "$@"
