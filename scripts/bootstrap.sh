#!/usr/bin/env bash
# Creates .venv inside the repo and installs raftsink with its dev extras (everything: the
# server, the Spark source, the demo, the fault campaign, the test and bench stack).
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

# Inputs of the install: the dependency list and the compiled modules (setup.py builds
# connectors/spark/_v2records.c and sink/kafka/protocol/_record_walk.c in place; an edit to
# either needs a rebuild).
want="$(cat "$ROOT/pyproject.toml" "$ROOT/setup.py" "$ROOT/connectors/spark/_v2records.c" \
    "$ROOT/sink/kafka/protocol/_record_walk.c" |
    sha256sum | cut -d' ' -f1)"
# pip's chatter is kept out of the way: this machine's pip.conf names local indexes that may
# not exist (one "Location ... is ignored" warning per package) and setuptools prints an
# editable-install banner. Each step's output goes to a log that is shown in full only when
# the step fails, so real errors are never hidden.
quiet_pip() {  # quiet_pip WHAT ARGS...
    local what="$1" log
    shift
    log="$(mktemp "${TMPDIR:-/tmp}/raftsink-pip.XXXXXX.log")"
    if ! "$VENV/bin/python" -m pip "$@" >"$log" 2>&1; then
        echo "bootstrap: $what failed; pip's output:" >&2
        cat "$log" >&2
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}

if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    echo "bootstrap: installing raftsink[dev] and dependencies (first run builds pyspark, ~1-2 min)" >&2
    t0=$(date +%s)
    quiet_pip "upgrading pip" install --upgrade pip
    quiet_pip "installing raftsink[dev]" install -e "$ROOT[dev]"
    echo "$want" > "$STAMP"
    echo "bootstrap: installed in $(($(date +%s) - t0)) s" >&2
fi
