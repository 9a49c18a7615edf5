#!/usr/bin/env bash
# The files of the secure compose variant (docker/compose.secure.yaml): a throw-away CA,
# one certificate per node, a client certificate, and the bootstrap super user `admin`.
#
#   docker/make-secure.sh [DIR]        (default: docker/secure, which git ignores)
#
# DIR/ca/       ca.pem + ca.key (the CA's key never goes into a container) and the pairs
# DIR/nodeN/    what node N mounts at /certs (read-only): ca.pem, node.pem, node.key (its own
#               pair only) and users.txt (`admin:PASSWORD`, the bootstrap user)
# DIR/client/   ca.pem, client.pem/.key, admin.password and client.properties (librdkafka /
#               kcat -F settings for SASL_SSL as admin over the external listeners)
#
# Certificates name node1..node3 (the compose network), localhost, 127.0.0.1 and
# $RAFTSINK_HOST when set (clients on other machines); DAYS (default 30) sets their
# validity (scripts/make-certs.sh). Run again: the CA and the admin password are kept (the
# cluster stored the admin's credential in its log at the first start), certificates are
# renewed (then `docker compose kill -s HUP` reloads them without a restart).
# The nodes run as uid 10001 (docker/Dockerfile): as root this script hands the node
# directories to that uid (keys stay mode 600); otherwise do it yourself with sudo.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/docker/secure}"
NODE_UID=10001
mkdir -p "$DIR/ca" "$DIR/client"
DIR="$(cd "$DIR" && pwd)"

hosts="node1,node2,node3${RAFTSINK_HOST:+,$RAFTSINK_HOST}"
CERT_HOSTS="$hosts" bash "$ROOT/scripts/make-certs.sh" "$DIR/ca" node1 node2 node3 client

umask 077
if [ ! -s "$DIR/client/admin.password" ]; then
    # 24 random bytes, base64 without characters that need quoting anywhere.
    openssl rand -base64 24 | tr -d '/+=\n' >"$DIR/client/admin.password"
fi
password="$(cat "$DIR/client/admin.password")"

for i in 1 2 3; do
    d="$DIR/node$i"
    mkdir -p "$d"
    cp "$DIR/ca/ca.pem" "$d/ca.pem"
    cp "$DIR/ca/node$i.pem" "$d/node.pem"
    cp "$DIR/ca/node$i.key" "$d/node.key"
    printf 'admin:%s\n' "$password" >"$d/users.txt"
    chmod 700 "$d"
    chmod 644 "$d/ca.pem" "$d/node.pem"
    if [ "$(id -u)" -eq 0 ]; then
        chown -R "$NODE_UID:$NODE_UID" "$d"
    fi
done
if [ "$(id -u)" -ne 0 ]; then
    echo "make-secure.sh: not root: the nodes (uid $NODE_UID) must read $DIR/node*: run" \
        "sudo chown -R $NODE_UID:$NODE_UID $DIR/node1 $DIR/node2 $DIR/node3" >&2
fi

cp "$DIR/ca/ca.pem" "$DIR/ca/client.pem" "$DIR/ca/client.key" "$DIR/client/"
cat >"$DIR/client/client.properties" <<PROPS
security.protocol=sasl_ssl
ssl.ca.location=$DIR/client/ca.pem
sasl.mechanism=SCRAM-SHA-512
sasl.username=admin
sasl.password=$password
PROPS
echo "make-secure.sh: files in $DIR; clients: $DIR/client/client.properties" >&2
