#!/usr/bin/env bash
# Install mnemoscope into ./.venv and run the offline demo (no model, no key, no network
# once installed). The 'sql' extra gives the demo its persistent SQLite session; the native
# long-term store and the agentic memory need nothing more.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MNEMOSCOPE_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e ".[sql]"
"$VENV/bin/mnemoscope" demo "$@"
