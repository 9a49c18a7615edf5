"""Importing the Spark source loads the read API's thin client only: no raftlog, no lmdb, no
server module of sink (every Spark executor imports it). Checked in a fresh interpreter, so
nothing this test process imported earlier can hide a heavy import."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import connectors.spark
print(json.dumps(sorted(sys.modules)))
"""

HEAVY_PREFIXES = ("raftlog", "lmdb", "sink.readapi.server", "sink.kafka", "sink.state")


def test_connectors_spark_loads_neither_raftlog_nor_lmdb():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    loaded = json.loads(out.strip().splitlines()[-1])
    heavy = [m for m in loaded if m.startswith(HEAVY_PREFIXES)]
    assert heavy == [], f"importing connectors.spark loaded {heavy}"
    # The client it does load is the read API's thin leaf.
    assert "sink.readapi.client" in loaded
    assert [m for m in loaded if m.startswith("sink.")] == [
        "sink.readapi",
        "sink.readapi.client",
        "sink.readapi.read_api_pb2",
        "sink.readapi.wire",
    ]
