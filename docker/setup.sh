#!/usr/bin/env bash
# Make a Docker engine answer, then build raftsink's image. Idempotent; fast when warm.
#
#   docker/setup.sh            engine + sweep of leftover test containers + base image + raftsink:dev
#   docker/setup.sh engine     only make sure an engine answers (and sweep leftovers)
#   docker/setup.sh image      only (re)build the image (engine must answer); ~0.2 s when unchanged;
#                              also raftsink-client:dev (the image + confluent-kafka) that the
#                              container tests run in-network clients from
#   docker/setup.sh spark      build raftsink-spark:dev (+ pyspark, pyarrow, a JRE) for compose's
#                              spark-demo service (about 2 min and 1 GB the first time)
#
# Environment:
#   RAFTSINK_IMAGE       tag to build (default raftsink:dev)
#   RAFTSINK_SPARK_IMAGE tag of the Spark demo image (default raftsink-spark:dev)
#   RAFTSINK_CLIENT_IMAGE tag of the test client image (default raftsink-client:dev)
#   BASE_IMAGE           base to build from (default: python:3.11-slim when present or pullable,
#                        else an offline Debian bookworm base made with debootstrap)
#   DEBIAN_MIRROR        mirror for debootstrap (default: the first one in this machine's apt sources)
#   SETUP_NO_INSTALL=1   never apt-get install / start dockerd; just report what is missing
#
# On Debian as root with no engine it installs docker.io (+ debootstrap, iptables) and starts
# dockerd in the background (log: /var/log/raftsink-dockerd.log), removing stale pid files that a
# SIGKILLed engine leaves behind (they make a new dockerd fail with "timeout waiting for containerd").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${RAFTSINK_IMAGE:-raftsink:dev}"
SPARK_IMAGE="${RAFTSINK_SPARK_IMAGE:-raftsink-spark:dev}"
CLIENT_IMAGE="${RAFTSINK_CLIENT_IMAGE:-raftsink-client:dev}"
OFFLINE_BASE="local/python3.11-bookworm:minbase"
DOCKERD_LOG=/var/log/raftsink-dockerd.log
export DOCKER_BUILDKIT=0 # classic builder: portable, and what docker-py/testcontainers use

t0=$(date +%s%N)
say() {
    local d=$((($(date +%s%N) - t0) / 100000000))
    printf '[setup %3d.%ds] %s\n' $((d / 10)) $((d % 10)) "$*" >&2
}
die() {
    echo "docker/setup.sh: error: $*" >&2
    exit 1
}

engine_answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# A pid file is stale when its process is gone or a zombie (a killed engine whose parent
# never reaped it): a new dockerd/containerd would believe it is still running.
remove_stale_pidfile() {
    local f="$1" pid state
    [ -f "$f" ] || return 0
    pid="$(tr -dc '0-9' <"$f" || true)"
    if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
        state="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$pid/stat")"
        if [ "$state" != "Z" ] && [ "$state" != "X" ]; then
            return 1 # alive
        fi
    fi
    say "removing stale pid file $f (pid ${pid:-?} is gone or a zombie)"
    rm -f "$f"
}

# Live (non-zombie) processes with this exact command name.
live_procs() {
    local name="$1" p state
    for p in /proc/[0-9]*; do
        [ "$(cat "$p/comm" 2>/dev/null)" = "$name" ] || continue
        state="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "$p/stat" 2>/dev/null || echo X)"
        [ "$state" = "Z" ] || [ "$state" = "X" ] || echo "${p#/proc/}"
    done
}

wait_engine() {
    local secs="$1" i
    for ((i = 0; i < secs * 5; i++)); do
        engine_answers && return 0
        sleep 0.2
    done
    return 1
}

ensure_engine() {
    if engine_answers; then
        say "engine answers (server $(docker version --format '{{.Server.Version}}'))"
        return 0
    fi
    command -v docker >/dev/null 2>&1 || [ "$(id -u)" -eq 0 ] || die "no docker CLI and not root"
    if [ -n "${DOCKER_HOST:-}" ]; then
        die "DOCKER_HOST=$DOCKER_HOST does not answer"
    fi
    if [ "${SETUP_NO_INSTALL:-0}" = 1 ] || [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        die "no Docker engine answers and this script can only start one as root on Debian (apt-get); start dockerd yourself"
    fi
    # A dockerd that is alive but not answering yet (just started by someone else): give it time.
    if [ -n "$(live_procs dockerd)" ]; then
        say "a dockerd is running (pid $(live_procs dockerd | tr '\n' ' ')) but does not answer yet; waiting up to 30 s"
        wait_engine 30 && {
            say "engine answers"
            return 0
        }
        die "dockerd (pid $(live_procs dockerd | tr '\n' ' ')) runs but does not answer in 30 s; see $DOCKERD_LOG"
    fi
    local pkgs=()
    command -v dockerd >/dev/null 2>&1 || pkgs+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || pkgs+=(debootstrap)
    command -v iptables >/dev/null 2>&1 || pkgs+=(iptables)
    if [ ${#pkgs[@]} -gt 0 ]; then
        say "installing ${pkgs[*]} with apt-get (about 20 s)"
        export DEBIAN_FRONTEND=noninteractive
        if ! apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/tmp/raftsink-apt.log 2>&1; then
            apt-get update -qq >>/tmp/raftsink-apt.log 2>&1 || true
            apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >>/tmp/raftsink-apt.log 2>&1 ||
                die "apt-get install ${pkgs[*]} failed; see /tmp/raftsink-apt.log"
        fi
    fi
    if [ -z "$(live_procs containerd)" ]; then
        remove_stale_pidfile /var/run/docker/containerd/containerd.pid || true
    fi
    remove_stale_pidfile /var/run/docker.pid ||
        die "/var/run/docker.pid names a live process but no engine answers"
    # A socket left by a dead engine makes the CLI hang or fail confusingly; dockerd recreates it.
    [ -S /var/run/docker.sock ] && rm -f /var/run/docker.sock
    say "starting dockerd (log: $DOCKERD_LOG)"
    setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
    wait_engine 60 || {
        tail -n 20 "$DOCKERD_LOG" >&2 || true
        die "dockerd did not answer within 60 s; see $DOCKERD_LOG"
    }
    say "engine answers (server $(docker version --format '{{.Server.Version}}'))"
}

# Containers (and networks) a killed test run left behind.
sweep_leftovers() {
    local ids
    ids="$(docker ps -aq --filter label=org.testcontainers=true)"
    if [ -n "$ids" ]; then
        say "removing $(echo "$ids" | wc -l) leftover testcontainers container(s)"
        echo "$ids" | xargs docker rm -f -v >/dev/null
    fi
    ids="$(docker network ls -q --filter label=org.testcontainers=true)"
    if [ -n "$ids" ]; then
        say "removing $(echo "$ids" | wc -l) leftover testcontainers network(s)"
        echo "$ids" | xargs docker network rm >/dev/null 2>&1 || true
    fi
}

debian_mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then
        echo "$DEBIAN_MIRROR"
        return
    fi
    local m
    m="$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n1)"
    [ -n "$m" ] || m="$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
        awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' | grep -v security | head -n1)"
    [ -n "$m" ] || die "no Debian mirror found in /etc/apt sources; set DEBIAN_MIRROR"
    echo "$m"
}

# Prints the base image to build from.
choose_base() {
    if [ -n "${BASE_IMAGE:-}" ]; then
        docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 ||
            timeout 120 docker pull -q "$BASE_IMAGE" >&2 ||
            die "BASE_IMAGE=$BASE_IMAGE is neither present nor pullable"
        echo "$BASE_IMAGE"
        return
    fi
    if docker image inspect python:3.11-slim >/dev/null 2>&1; then
        echo python:3.11-slim
        return
    fi
    if docker image inspect "$OFFLINE_BASE" >/dev/null 2>&1; then
        echo "$OFFLINE_BASE"
        return
    fi
    say "trying to pull python:3.11-slim"
    if timeout 60 docker pull -q python:3.11-slim >/dev/null 2>&1; then
        echo python:3.11-slim
        return
    fi
    say "python:3.11-slim cannot be pulled: building $OFFLINE_BASE with debootstrap (about 50 s)"
    build_offline_base
    echo "$OFFLINE_BASE"
}

build_offline_base() {
    command -v debootstrap >/dev/null 2>&1 || {
        [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null || die "debootstrap is missing"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
            >/tmp/raftsink-apt.log 2>&1 || die "apt-get install debootstrap failed; see /tmp/raftsink-apt.log"
    }
    local mirror rootfs
    mirror="$(debian_mirror)"
    rootfs="$(mktemp -d /tmp/raftsink-rootfs.XXXXXX)"
    # shellcheck disable=SC2064
    trap "rm -rf '$rootfs'" EXIT
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" "$mirror" >/tmp/raftsink-debootstrap.log 2>&1 ||
        die "debootstrap failed; see /tmp/raftsink-debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
    say "importing the root file system as $OFFLINE_BASE"
    tar -C "$rootfs" -c . | docker import \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'ENV LANG=C.UTF-8' \
        -c 'CMD ["python3"]' \
        - "$OFFLINE_BASE" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
}

# The build context is a tar of only what the image needs (no .venv, no .git, no caches), so
# no .dockerignore is needed, plus this machine's CA bundle for pip behind a TLS proxy.
# build_image TAG [docker build args...]
build_image() {
    local tag="$1" base ca=""
    shift
    base="$(choose_base)"
    [ -f /etc/ssl/certs/ca-certificates.crt ] && ca=/etc/ssl/certs/ca-certificates.crt
    say "building $tag from $base${*:+ ($*)}"
    local log
    log="$(mktemp /tmp/raftsink-build.XXXXXX.log)"
    local extra=()
    [ -n "$ca" ] && extra=(-C "$(dirname "$ca")" "$(basename "$ca")"
        --transform "s,^$(basename "$ca")\$,docker/extra-ca.crt,")
    if ! tar -c --dereference --owner=0 --group=0 --numeric-owner --mode='u+rwX,go+rX,go-w' \
        --sort=name --exclude='__pycache__' --exclude='*.pyc' --exclude='*.egg-info' --exclude='*.so' \
        --exclude='docker/extra-ca.crt' \
        -C "$ROOT" pyproject.toml setup.py README.md raftlog sink connectors chaos demos docker "${extra[@]}" |
        docker build -f docker/Dockerfile --build-arg BASE_IMAGE="$base" "$@" -t "$tag" - >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "image build failed; full log: $log"
    fi
    local steps cached
    steps="$(grep -c '^Step ' "$log" || true)"
    cached="$(grep -c 'Using cache' "$log" || true)"
    rm -f "$log"
    say "built $tag ($cached of $steps steps cached; $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%d MB", $1/1e6}'))"
    # The image this tag had before is now dangling: remove it (build cache layers stay).
    docker image prune -f --filter label=org.opencontainers.image.title=raftsink >/dev/null 2>&1 || true
}

# The container tests' client image: FROM the node image, plus a Kafka client (no context).
build_client_image() {
    local log
    log="$(mktemp /tmp/raftsink-build.XXXXXX.log)"
    if ! docker build --build-arg NODE_IMAGE="$IMAGE" -t "$CLIENT_IMAGE" - \
        <"$ROOT/docker/Dockerfile.client" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "client image build failed; full log: $log"
    fi
    rm -f "$log"
    say "built $CLIENT_IMAGE ($(docker image inspect -f '{{.Size}}' "$CLIENT_IMAGE" | awk '{printf "%d MB", $1/1e6}'))"
    docker image prune -f --filter label=org.opencontainers.image.title=raftsink-client >/dev/null 2>&1 || true
}

case "${1:-all}" in
    engine)
        ensure_engine
        sweep_leftovers
        ;;
    image)
        engine_answers || die "no Docker engine answers (run docker/setup.sh first)"
        build_image "$IMAGE"
        build_client_image
        ;;
    spark)
        engine_answers || die "no Docker engine answers (run docker/setup.sh first)"
        build_image "$SPARK_IMAGE" --build-arg WITH_SPARK=1
        ;;
    all)
        ensure_engine
        sweep_leftovers
        build_image "$IMAGE"
        build_client_image
        ;;
    *)
        echo "usage: docker/setup.sh [all|engine|image|spark]" >&2
        exit 2
        ;;
esac
say "done"
