#!/usr/bin/env bash
# raftsink's two entry points. Each bootstraps the repo's .venv by itself.
#   ./run.sh demo [ARGS]    the main job (see README)
#   ./run.sh test [PYTEST ARGS]   lint + the whole test suite
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    demo)
        bash scripts/bootstrap.sh
        exec .venv/bin/raftsink demo "$@"
        ;;
    test)
        bash scripts/bootstrap.sh
        bash scripts/test-deps.sh
        echo "== docker" >&2
        if ! bash docker/setup.sh; then
            if [ -n "${CI:-}" ]; then
                echo "run.sh: docker/setup.sh failed; CI needs the container tests" >&2
                exit 1
            fi
            echo "run.sh: no Docker engine: tests/containers will skip" >&2
        fi
        echo "== ruff" >&2
        .venv/bin/ruff check .
        echo "== pytest" >&2
        set +e
        .venv/bin/python -m pytest "$@"
        rc=$?
        set -e
        if [ "$rc" -eq 5 ]; then
            echo "run.sh: pytest collected no tests: that is a failure" >&2
            exit 1
        fi
        exit "$rc"
        ;;
    *)
        echo "usage: ./run.sh demo [ARGS] | ./run.sh test [PYTEST ARGS]" >&2
        exit 2
        ;;
esac
