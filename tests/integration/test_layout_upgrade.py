"""A one-group cluster restarted with cluster.partition_groups on (an operator's change,
or a release whose default is partition groups): real `raftsink serve` processes created
with the setting off write records, then restart with it on. Each data directory keeps
the layout it was created with (sink/node/layout.py): every acknowledged record is still
served, new records are accepted, and each node says once at WARNING why it ignores the
setting. (Before, the nodes started an empty groups cluster beside their data.)"""

from __future__ import annotations

import asyncio
import os

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition

from sink.process_cluster import SinkProcessCluster

TOPIC = "upgrade"
PARTITIONS = 2


def _produce(bootstrap: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 2})
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v, partition=i % PARTITIONS)
    assert p.flush(60) == 0


def _consume_all(bootstrap: str, want: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "upgrade-check",
            "enable.auto.commit": False,
            "log_level": 2,
        }
    )
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    try:
        for _ in range(600):  # at most 600 polls of 0.5 s
            if len(got) >= want:
                break
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


@pytest.mark.timeout(240)
def test_a_one_group_cluster_keeps_its_records_when_started_with_groups_on(tmp_path):
    os.environ.pop("RAFTSINK_CLUSTER_PARTITION_GROUPS", None)
    cluster = SinkProcessCluster(
        str(tmp_path), default_partitions=PARTITIONS, partition_groups=False
    )
    cluster.start()
    try:
        asyncio.run(cluster.wait_ready())
        before = [f"old-{i}".encode() for i in range(200)]
        _produce(cluster.bootstrap_servers, before)
        cluster.stop()
        for n in cluster.nodes.values():
            assert os.path.isdir(os.path.join(n.data_dir, "log"))
        cluster.args.remove("--no-cluster-partition-groups")
        cluster.args.append("--cluster-partition-groups")
        cluster.start()
        asyncio.run(cluster.wait_ready())
        after = [f"new-{i}".encode() for i in range(50)]
        _produce(cluster.bootstrap_servers, after)
        got = _consume_all(cluster.bootstrap_servers, len(before) + len(after))
        assert sorted(got) == sorted(before + after)
        for i, n in cluster.nodes.items():
            assert not os.path.exists(os.path.join(n.data_dir, "groups")), i
            with open(n.log_path, errors="replace") as fh:
                log = fh.read()
            assert log.count("sink.layout") == 1, log
            assert "cluster.partition_groups=false to silence this" in log, log
        assert not cluster.exited()
    finally:
        cluster.stop()
