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
        # pytest ARGS -> its exit code; 5 (nothing collected) counts as a failure (1).
        run_pytest() {
            set +e
            .venv/bin/python -m pytest "$@"
            local rc=$?
            set -e
            if [ "$rc" -eq 5 ]; then
                echo "run.sh: pytest collected no tests: that is a failure" >&2
                return 1
            fi
            return "$rc"
        }
        if [ $# -gt 0 ]; then
            # Arguments: exactly the pytest run they ask for, in one process.
            echo "== pytest" >&2
            run_pytest "$@" && exit 0 || exit $?
        fi
        # The whole suite in two phases (tests/conftest.py SERIAL): the tests not marked
        # serial on RAFTSINK_TEST_WORKERS pytest-xdist workers (default 2, or 1 on a
        # one-core machine; whole modules per worker), then the serial ones alone.
        workers="${RAFTSINK_TEST_WORKERS:-$( [ "$(nproc)" -ge 2 ] && echo 2 || echo 1 )}"
        echo "== pytest: parallel phase ($workers workers)" >&2
        rc1=0
        run_pytest -n "$workers" --dist loadfile -m "not serial" \
            --junit-xml=build/pytest-junit.xml || rc1=$?
        echo "== pytest: serial phase" >&2
        rc2=0
        run_pytest -m serial --junit-xml=build/pytest-junit-serial.xml || rc2=$?
        echo "run.sh: parallel phase exit $rc1, serial phase exit $rc2" >&2
        [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] || exit 1
        ;;
    *)
        echo "usage: ./run.sh demo [ARGS] | ./run.sh test [PYTEST ARGS]" >&2
        exit 2
        ;;
esac
