#!/usr/bin/env bash
# Creates .venv inside the repo and installs raftsink with its dev extras.
# Idempotent and fast when warm: the install is skipped while pyproject.toml is
# unchanged since the last successful install (stamp file in .venv), as are setup.py
# and the C source it compiles.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.raftsink-installed"

find_python() {
    for candidate in python3.11 python3.12 python3.13 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    return 1
}

if ! PY="$(find_python)"; then
    echo "bootstrap: installing python3 (>= 3.11 required)" >&2
    apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null
    PY="$(find_python)" || { echo "bootstrap: no Python >= 3.11 available" >&2; exit 1; }
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "bootstrap: creating $VENV with $("$PY" --version)" >&2
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then
        # Debian's python3 ships venv separately.
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
        "$PY" -m venv "$VENV"
    fi
fi

# Inputs of the install: the dependency list and the compiled module (setup.py builds
# connectors/spark/_v2records.c in place; an edit to it needs a rebuild).
want="$(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/connectors/spark/_v2records.c" |
    sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    echo "bootstrap: installing raftsink and dependencies (first run builds pyspark, ~1-2 min)" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[dev]" >&2
    echo "$want" > "$STAMP"
fi
