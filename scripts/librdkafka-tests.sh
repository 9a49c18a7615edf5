#!/usr/bin/env bash
# librdkafka's own regression suite, built for tests/integration/test_librdkafka_suite.py.
#
# librdkafka ships its test suite (tests/*.c, *.cpp, run-test.sh, test-runner) with its sources;
# the npm package node-rdkafka 3.6.1 carries librdkafka 2.12.0 whole under deps/librdkafka.
# This script fetches that tarball with `npm pack` (registry integrity check, no install
# scripts run), builds librdkafka and the test-runner binary, and caches the result under
#   ${RAFTSINK_TEST_CACHE:-~/.cache/raftsink-tests}/librdkafka-node-rdkafka-3.6.1/
# (outside the repository: nothing fetched is ever committed). A second run finds the cache and
# prints its path at once.
#
#   scripts/librdkafka-tests.sh          build if needed; print the tests directory (last line)
#   scripts/librdkafka-tests.sh --check  print the tests directory if built, else exit 1
#
# Quiet: build output goes to build.log in the cache directory; on failure its tail is shown.
# Needs node/npm, a C/C++ tool chain and make (build-essential). Only what the group tests need
# is compiled in: no SSL, GSSAPI, curl or zstd (fewer build dependencies, shorter build).
set -euo pipefail

VERSION=3.6.1
CACHE="${RAFTSINK_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/raftsink-tests}"
DEST="$CACHE/librdkafka-node-rdkafka-$VERSION"
TESTS="$DEST/librdkafka/tests"

say() { echo "librdkafka-tests: $*" >&2; }

built() { [ -x "$TESTS/test-runner" ] && [ -f "$DEST/librdkafka/src/librdkafka.so.1" ]; }

if built; then
    echo "$TESTS"
    exit 0
fi
if [ "${1:-}" = "--check" ]; then
    exit 1
fi

for tool in npm tar make cc c++; do
    command -v "$tool" >/dev/null 2>&1 || { say "missing $tool (apt-get install nodejs npm build-essential)"; exit 2; }
done

mkdir -p "$CACHE"
# One build at a time per cache (two pytest sessions may ask at once).
exec 9>"$CACHE/.librdkafka-$VERSION.lock"
flock 9
if built; then
    echo "$TESTS"
    exit 0
fi

work="$(mktemp -d "$CACHE/.librdkafka-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
start=$(date +%s)

fail() {
    say "$1 failed; the end of $log:"
    tail -n 30 "$log" >&2
    trap - EXIT # keep the log for a look
    exit 1
}

say "fetching node-rdkafka@$VERSION (npm pack) and building librdkafka + its test-runner (a few minutes, once)"
(cd "$work" && npm pack --ignore-scripts --silent "node-rdkafka@$VERSION" >>"$log" 2>&1) || fail "npm pack"
tar -C "$work" -xzf "$work/node-rdkafka-$VERSION.tgz" package/deps/librdkafka || fail "tar"
src="$work/package/deps/librdkafka"
jobs="$(nproc 2>/dev/null || echo 2)"
(
    cd "$src"
    # -O0: the suite checks behaviour, not speed, and -O0 compiles in about half the time.
    ./configure --disable-ssl --disable-gssapi --disable-curl --disable-zstd \
        --disable-optimization >>"$log" 2>&1
) || fail "configure"
make -C "$src" -j"$jobs" libs >>"$log" 2>&1 || fail "make libs"
make -C "$src/tests" -j"$jobs" test-runner >>"$log" 2>&1 || fail "make test-runner"

rm -rf "$DEST"
mkdir -p "$DEST"
mv "$src" "$DEST/librdkafka"
mv "$log" "$DEST/build.log"
echo "built in $(($(date +%s) - start)) s with $jobs jobs" >>"$DEST/build.log"
say "built in $(($(date +%s) - start)) s"
echo "$TESTS"
