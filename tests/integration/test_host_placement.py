"""Host separation with real processes: 4 `raftsink serve` processes emulating two
machines (`processes_per_host=2`: nodes 1-2 on host h1, 3-4 on h2). Each node registers
its node.host through the controller's log (sink/node/host_labels.py), so the
controller's leader, whichever node it is, never puts two replicas of a partition on
one host, and refuses a replication factor above the number of hosts. Before the
registration, the leader knew only its own label and counted every other node as its
own host: RF 2 topics got both replicas on one machine."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sink.process_cluster import SinkProcessCluster

HOSTS = {1: "h1", 2: "h1", 3: "h2", 4: "h2"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SinkProcessCluster(
        str(tmp_path_factory.mktemp("host-placement")),
        n=4,
        processes_per_host=2,
        partition_groups=True,
    ) as c:
        yield c


def _admin(cluster: SinkProcessCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def _replicas(admin: AdminClient, topic: str, partitions: int, deadline_s: float = 60.0):
    """Each partition's replica list from Metadata, once every partition has a leader."""
    end = time.monotonic() + deadline_s
    while True:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        parts = md.partitions
        if (
            md.error is None
            and len(parts) == partitions
            and all(p.leader >= 1 for p in parts.values())
        ):
            return {p.id: list(p.replicas) for p in parts.values()}
        assert time.monotonic() < end, f"{topic}: partitions not all led: {md.error} {parts}"
        time.sleep(0.2)


def test_every_node_registers_its_host_and_no_partition_has_two_replicas_on_one_host(
    cluster,
):
    admin = _admin(cluster)
    topic = "spread"
    admin.create_topics([NewTopic(topic, 8, replication_factor=2)])[topic].result(60)
    placed = _replicas(admin, topic, 8)
    print(f"replicas: {placed}")
    for p, replicas in placed.items():
        assert len(replicas) == 2, (p, replicas)
        assert HOSTS[replicas[0]] != HOSTS[replicas[1]], f"partition {p}: {replicas} share a host"
    used = {n for r in placed.values() for n in r}
    assert used == set(HOSTS), f"every process gets replicas: {used}"


def test_a_replication_factor_above_the_hosts_is_refused(cluster):
    admin = _admin(cluster)
    fut = admin.create_topics([NewTopic("three-copies", 1, replication_factor=3)])["three-copies"]
    with pytest.raises(KafkaException) as err:
        fut.result(60)
    kerr = err.value.args[0]
    assert kerr.name() == "INVALID_REPLICATION_FACTOR", kerr
    assert "distinct live hosts" in kerr.str() and "h1" in kerr.str(), kerr.str()


def test_the_default_replication_factor_is_bounded_by_the_hosts(cluster):
    """RF -1 (and auto-creation) takes min(3, hosts), not min(3, nodes): four processes
    on two machines give 2 replicas, one per host, where 3 would be refused."""
    admin = _admin(cluster)
    admin.create_topics([NewTopic("defaulted", 2)])["defaulted"].result(60)
    placed = _replicas(admin, "defaulted", 2)
    for p, replicas in placed.items():
        assert sorted(HOSTS[n] for n in replicas) == ["h1", "h2"], (p, replicas)
