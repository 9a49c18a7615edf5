#!/usr/bin/env bash
# Regenerates raftlog/transport/raft_pb2.py from raft.proto (needs the dev extras).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/raftlog/transport}"
cd "$ROOT/raftlog/transport"
"$ROOT/.venv/bin/python" -m grpc_tools.protoc -I. --python_out="$OUT" raft.proto
