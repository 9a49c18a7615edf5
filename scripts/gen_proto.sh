#!/usr/bin/env bash
# Regenerates the checked-in protobuf modules (needs the dev extras):
#   raftlog/transport/raft_pb2.py from raftlog/transport/raft.proto
#   sink/readapi/read_api_pb2.py  from sink/readapi/read_api.proto
# With an argument, writes both into that directory instead (the freshness test uses it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
gen() {  # gen SRC_DIR PROTO OUT_DIR
    (cd "$1" && "$PY" -m grpc_tools.protoc -I. --python_out="$3" "$2")
}
gen "$ROOT/raftlog/transport" raft.proto "${1:-$ROOT/raftlog/transport}"
gen "$ROOT/sink/readapi" read_api.proto "${1:-$ROOT/sink/readapi}"
