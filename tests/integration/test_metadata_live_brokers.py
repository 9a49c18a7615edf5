"""Metadata and DescribeCluster leave out the nodes the answering node declares down
(node liveness) while it hears a majority, as Kafka lists only live broker
registrations (real processes, partition groups on).

Before, every configured node was listed, a killed one too: KafkaJS's coordinator
lookup then sometimes picked the dead node first and retried (docs/kafka.md), and any
client could bootstrap from or send to it. Here: 3 nodes, node 3 killed -9: the live
nodes' Metadata (raw, and through librdkafka's admin client) and DescribeCluster leave
it out and name no partition leader that is not listed; node 3 started again is listed
again by every node. (An isolated node lists everyone: a majority's view only; unit
test in tests/unit/sink/test_handlers.py, and the container partition test.)"""

from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import AdminClient

from tests.helpers.kafka_wire import request
from tests.helpers.partition_groups import create_topic, groups_cluster, kafka_port, wait_for

TOPIC = "live-brokers"
PARTITIONS = 6


def _seen(port: int) -> tuple[list[int], dict[int, int], int, list[int]]:
    """(Metadata's brokers, partition -> leader, controller, DescribeCluster's brokers)
    as the node at port answers."""
    md = request(
        port,
        3,
        8,
        {
            "topics": [{"name": TOPIC}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    leaders = {
        p.partition_index: p.leader_id for t in md.topics if t.name == TOPIC for p in t.partitions
    }
    dc = request(port, 60, 0, {"include_cluster_authorized_operations": False})
    return (
        sorted(b.node_id for b in md.brokers),
        leaders,
        md.controller_id,
        sorted(b.broker_id for b in dc.brokers),
    )


def test_a_killed_node_leaves_metadata_and_comes_back(tmp_path):
    with groups_cluster(str(tmp_path), 3) as cluster:
        create_topic(cluster, TOPIC, PARTITIONS, 3)
        ports = {i: kafka_port(cluster, i) for i in (1, 2, 3)}
        for i in (1, 2, 3):
            brokers, leaders, _, described = _seen(ports[i])
            assert brokers == described == [1, 2, 3], (i, brokers, described)
            assert len(leaders) == PARTITIONS

        cluster.kill(3)
        last: dict[int, tuple] = {}

        def left_out() -> bool:
            for i in (1, 2):
                last[i] = _seen(ports[i])
                brokers, leaders, controller, described = last[i]
                if brokers != [1, 2] or described != [1, 2]:
                    return False
                # every id a client is told to send to is a listed broker (or -1)
                if any(lead not in (1, 2) for lead in leaders.values()):
                    return False
                if controller != i:  # itself: it relays controller requests (KIP-590)
                    return False
            return True

        wait_for(left_out, 60, lambda: f"node 3 left out by nodes 1 and 2: {last}")
        # A real client's reading of the same answer.
        admin = AdminClient({"bootstrap.servers": cluster.peers[1].kafka, "log_level": 0})
        assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2]

        cluster.start(3)

        def listed_again() -> bool:
            for i in (1, 2, 3):
                last[i] = _seen(ports[i])
                if last[i][0] != [1, 2, 3] or last[i][3] != [1, 2, 3]:
                    return False
            return True

        wait_for(listed_again, 120, lambda: f"node 3 listed again by every node: {last}")
