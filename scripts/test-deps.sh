#!/usr/bin/env bash
# System packages the test suite uses beyond the venv: kcat (librdkafka 2.0.2,
# one of the Kafka clients in the compatibility matrix). Installed with apt as
# root when missing; elsewhere a missing tool is reported and its tests fail in CI.
set -euo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "test-deps: missing ${need[*]} (install them; tests that need them fail in CI)" >&2
    exit 0
fi
echo "test-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${need[@]}" >/dev/null
}
