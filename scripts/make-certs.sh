#!/usr/bin/env bash
# A throw-away certificate authority and certificates for a TLS raftsink cluster.
#
#   scripts/make-certs.sh DIR [NAME...]
#
# DIR gets ca.pem/ca.key (the cluster CA) and, for each NAME (default: node1 node2
# node3 client), NAME.pem + NAME.key signed by that CA. Every certificate names
# localhost and 127.0.0.1 (plus $CERT_HOSTS, comma-separated DNS names, e.g.
# CERT_HOSTS=node1,node2,node3 for the compose network) and is good for server and
# client use (mutual TLS between nodes). DAYS (default 30) sets the validity; DAYS=-1
# makes already-expired certificates (tests). Nothing here is a secret worth keeping:
# generate your own for production with your own CA, never commit keys.
set -euo pipefail

dir=${1:?usage: make-certs.sh DIR [NAME...]}
shift || true
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(node1 node2 node3 client)
days=${DAYS:-30}
mkdir -p "$dir"
cd "$dir"

if [ ! -f ca.pem ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
    -subj "/CN=raftsink-test-ca-$RANDOM" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

san="DNS:localhost,IP:127.0.0.1"
IFS=',' read -r -a extra <<<"${CERT_HOSTS:-}"
for h in "${extra[@]}"; do [ -n "$h" ] && san="$san,DNS:$h"; done

for name in "${names[@]}"; do
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" \
    -subj "/CN=$name" 2>/dev/null
  ext=$(mktemp)
  cat >"$ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san
EXT
  if [ "$days" -lt 0 ]; then
    # An expired certificate (valid from two days ago until yesterday): `openssl ca`
    # takes explicit dates where openssl 3.0's `x509 -req` does not.
    db=$(mktemp -d)
    touch "$db/index.txt"
    cat >"$db/ca.cnf" <<CNF
[ca]
default_ca=tmp
[tmp]
database=$db/index.txt
new_certs_dir=$db
serial=$db/serial
default_md=sha256
policy=any
copy_extensions=none
[any]
commonName=supplied
CNF
    echo 01 >"$db/serial"
    openssl ca -batch -config "$db/ca.cnf" -cert ca.pem -keyfile ca.key -in "$name.csr" \
      -startdate "$(date -u -d '2 days ago' +%y%m%d%H%M%SZ)" \
      -enddate "$(date -u -d '1 day ago' +%y%m%d%H%M%SZ)" \
      -extfile "$ext" -out "$name.pem" -notext 2>/dev/null
    rm -rf "$db"
  else
    openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
      -days "$days" -extfile "$ext" -out "$name.pem" 2>/dev/null
  fi
  rm -f "$ext" "$name.csr"
  chmod 600 "$name.key"
done
chmod 600 ca.key
echo "$dir: ca.pem ${names[*]/%/.pem}"
