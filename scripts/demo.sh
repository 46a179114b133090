#!/usr/bin/env bash
# Install mnemoscope into ./.venv and run the offline demo (no model, no key, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MNEMOSCOPE_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e .
"$VENV/bin/mnemoscope" demo "$@"
