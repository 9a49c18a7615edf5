"""Record the message sets real old clients send, for tests/unit/sink/old_client_sets.py.

Starts a 3-node cluster behind the recording proxy, has Sarama 1.22 (default version:
magic 0 gzip/snappy; V0_10_0_0: magic 1 gzip/snappy/lz4) and librdkafka 2.16 without
ApiVersions (fallback 0.9.0: magic 0 with KAFKA-3160's lz4 header checksum) produce a few
keyed records, and writes the first partition's records of every Produce v0-2 request,
hex-encoded, with what was sent. Regenerate (needs Sarama, scripts/test-deps.sh) with

    python -m tests.helpers.kafka_record_old_clients tests/unit/sink/old_client_sets.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import confluent_kafka as ck
from kio.serial import entity_reader

from sink.kafka.protocol import request_schema
from tests.helpers import client_tools
from tests.helpers.recorded_cluster import RecordedSinkCluster

N = 5


def _records_of(frame: bytes) -> bytes:
    """The first partition's records of a Produce request frame."""
    cls = request_schema(0, int.from_bytes(frame[2:4], "big"))
    _h, n = entity_reader(cls.__header_schema__)(frame, 0)
    req, _ = entity_reader(cls)(frame, n)
    return bytes(req.topic_data[0].partition_data[0].records)


def record(path: str) -> None:
    sarama = client_tools.sarama_binary()
    base = tempfile.mkdtemp(prefix="old-clients-")
    cluster = RecordedSinkCluster(base, default_partitions=1)
    sets: list[tuple[str, str, str]] = []
    try:
        cluster.start_all()
        runs = [("default", c) for c in ("gzip", "snappy")]
        runs += [("V0_10_0_0", c) for c in ("gzip", "snappy", "lz4")]
        for version, codec in runs:
            topic = f"rec-{version}-{codec}"
            cid = f"rec-sarama-{version}-{codec}"
            argv = [sarama, "-brokers", cluster.bootstrap_servers, "-version", version]
            argv += ["-op", "produce", "-topic", topic, "-n", str(N), "-client-id", cid]
            argv += ["-timeout", "25s", "-compression", codec]
            subprocess.run(argv, check=True, capture_output=True, timeout=60)
            sets += _produce_sets(cluster, cid, f"sarama {version} {codec}", topic)
        for codec in ("gzip", "snappy", "lz4"):
            topic = f"rec-rdk-{codec}"
            cid = f"rec-rdk-{codec}"
            conf = {
                "bootstrap.servers": cluster.bootstrap_servers,
                "client.id": cid,
                "api.version.request": False,
                "broker.version.fallback": "0.9.0",
                "compression.codec": codec,
                "linger.ms": 50,
            }
            p = ck.Producer(conf)
            for i in range(N):
                p.produce(topic, key=f"k{i}", value=f"{topic}-v{i}")
            assert p.flush(30) == 0
            del p
            sets += _produce_sets(cluster, cid, f"librdkafka 0.9.0 {codec}", topic)
    finally:
        cluster.stop_all()
    with open(path, "w") as f:
        f.write('"""Message sets real old clients sent (Produce v0-2, first partition), recorded\n')
        f.write("by tests/helpers/kafka_record_old_clients.py: (client, topic, records hex).\n")
        f.write(
            f'Each holds keys k0..k{N - 1} with values <topic>-v0..; do not edit by hand."""\n\n'
        )
        f.write("SETS = [\n")
        for who, topic, hexdata in sets:
            f.write(f"    ({who!r}, {topic!r}, {hexdata!r}),\n")
        f.write("]\n")


def _produce_sets(cluster, cid: str, who: str, topic: str) -> list[tuple[str, str, str]]:
    deadline = time.monotonic() + 10
    while True:
        ex = [e for e in cluster.recorder.exchanges(cid) if e.api_key == 0 and e.api_version < 3]
        if ex or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # the proxy records asynchronously; poll with a deadline
    assert ex, f"{who}: no Produce v0-2 recorded"
    return [(who, topic, _records_of(e.request).hex()) for e in ex]


if __name__ == "__main__":
    record(sys.argv[1])
