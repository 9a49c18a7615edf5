#!/usr/bin/env bash
# Test dependencies beyond the venv: the real Kafka clients of the version-window tests
# (tests/integration/test_client_windows.py) and of tests/integration/test_kafka_clients.py.
#   - kcat (Debian; librdkafka 2.0.2 built in): the old version windows
#   - golang-go + golang-github-shopify-sarama-dev (Debian): Sarama, built offline from
#     /usr/share/gocode by the tests (GOPATH mode, GOPROXY=off: no module download)
#   - kafkajs (npm, pinned in tests/clients/js/package.json) into tests/clients/js/node_modules
#     (nodejs and npm from Debian when the machine has none)
#   - librdkafka's own test suite (npm node-rdkafka 3.6.1, built by scripts/librdkafka-tests.sh
#     into ~/.cache/raftsink-tests, not the repo) for tests/integration/test_librdkafka_suite.py
# Quiet: one line per install, nothing when everything is present. apt needs root (CI runs
# as root on Debian 12); elsewhere a missing package is reported in one line. A failed install
# does not stop `./run.sh test`: the tests that need the tool fail with a clear message under
# CI=true and skip otherwise.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { echo "test-deps: $*" >&2; }

# ---------------------------------------------------------------- Debian packages
pkgs=()
command -v kcat >/dev/null 2>&1 || pkgs+=(kcat)
command -v go >/dev/null 2>&1 || pkgs+=(golang-go)
[ -d /usr/share/gocode/src/github.com/Shopify/sarama ] || pkgs+=(golang-github-shopify-sarama-dev)
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
if [ ${#pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "missing ${pkgs[*]} (apt-get install them as root; their tests fail in CI)"
    else
        say "installing ${pkgs[*]} (apt)"
        export DEBIAN_FRONTEND=noninteractive
        apt_install() {
            # Another apt run on the machine holds the lock for a while: wait for it.
            apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 \
                "${pkgs[@]}" >/dev/null 2>&1
        }
        if ! apt_install; then
            apt-get update -qq -o DPkg::Lock::Timeout=300 >/dev/null 2>&1
            apt_install || say "apt-get install ${pkgs[*]} failed"
        fi
    fi
fi

# ---------------------------------------------------------------- npm: kafkajs
JS="$ROOT/tests/clients/js"
want="$(node -e 'console.log(require(process.argv[1]).dependencies.kafkajs)' \
    "$JS/package.json" 2>/dev/null || true)"
have="$(node -e 'console.log(require(process.argv[1]).version)' \
    "$JS/node_modules/kafkajs/package.json" 2>/dev/null || true)"
if ! command -v npm >/dev/null 2>&1; then
    say "missing node/npm (apt-get install nodejs npm); the KafkaJS tests fail in CI"
elif [ -z "$want" ]; then
    say "no kafkajs version pinned in $JS/package.json"
elif [ "$have" != "$want" ]; then
    say "installing kafkajs@$want (npm) into tests/clients/js/node_modules"
    (cd "$JS" && npm install --no-audit --no-fund --no-save --loglevel=error \
        --no-package-lock >/dev/null 2>&1) || say "npm install kafkajs@$want failed"
fi

# ---------------------------------------------------------------- librdkafka's test suite
if command -v npm >/dev/null 2>&1 && ! bash "$ROOT/scripts/librdkafka-tests.sh" --check >/dev/null 2>&1; then
    bash "$ROOT/scripts/librdkafka-tests.sh" >/dev/null \
        || say "building librdkafka's test suite failed (scripts/librdkafka-tests.sh)"
fi
exit 0
