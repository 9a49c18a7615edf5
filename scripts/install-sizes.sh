#!/usr/bin/env bash
# Installed size of each install of raftsink: a fresh venv per extra, `pip install` of a copy of
# this tree (not editable), then `du -sh` of its site-packages (pip and setuptools included:
# about 20 MB of every figure). Prints one line per install; removes the venvs.
#   scripts/install-sizes.sh [EXTRA ...]     default: base spark demo chaos dev
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/raftsink-sizes.XXXXXX")"
trap 'rm -rf "$work"' EXIT
tar -C "$ROOT" -c --exclude=.git --exclude=.venv --exclude=__pycache__ --exclude='*.egg-info' \
    --exclude=build --exclude='*.so' --exclude=bench . | (mkdir "$work/src" && tar -C "$work/src" -x)
[ $# -gt 0 ] || set -- base spark demo chaos dev
for extra in "$@"; do
    venv="$work/venv-$extra"
    "$PY" -m venv "$venv"
    spec="$work/src"
    [ "$extra" = base ] || spec="$work/src[$extra]"
    t0=$(date +%s)
    log="$work/pip-$extra.log"
    if ! "$venv/bin/python" -m pip install "$spec" >"$log" 2>&1; then
        cat "$log" >&2
        exit 1
    fi
    size="$(du -sh "$venv"/lib/python3*/site-packages | cut -f1)"
    printf '%-6s %6s  (%d packages, installed in %d s)\n' "$extra" "$size" \
        "$("$venv/bin/python" -m pip list --format=freeze 2>/dev/null | wc -l)" $(($(date +%s) - t0))
    rm -rf "$venv"
done
