"""Every node names itself the controller (Metadata, DescribeCluster) and relays
controller requests to the controller group's leader, as KRaft's brokers name a live
broker and forward (KIP-590); real `raftsink serve` processes, partition groups on.
(With authorization on, relays travel in an Envelope with the client's principal:
tests/integration/test_acls.py.)

Before, the controller named was the Raft leader: an admin client that read Metadata
before that leader was killed waited 5 minutes (librdkafka waits for the controller its
last Metadata named and reads Metadata again only on its periodic refresh)."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.partition_groups import groups_cluster, kafka_port


def test_an_admin_client_goes_on_after_the_raft_leader_is_killed(tmp_path):
    """A client whose controller (the node it asked) is not the Raft leader creates a
    topic after the leader is killed: the relay waits for the next controller."""
    with groups_cluster(str(tmp_path), 3) as cluster:
        leader = asyncio.run(cluster.wait_ready(60))  # the controller group's leader
        port = kafka_port(cluster, next(n for n in cluster.nodes if n != leader))
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
        # librdkafka sends Metadata to any broker it is connected to, not only the one it
        # bootstrapped from (CI: the Raft leader answered, naming itself); the client's
        # controller is whatever its last answer named. Ask until a node other than the
        # Raft leader answered (each node names itself: the bootstrap connection's answer
        # carries no broker id, orig_broker_id -1).
        deadline = time.monotonic() + 30
        while True:
            md = admin.list_topics(timeout=10)
            assert md.controller_id in cluster.nodes, md.controller_id
            assert sorted(md.brokers) == sorted(cluster.nodes)
            if md.controller_id != leader:
                break
            assert time.monotonic() < deadline, "only the Raft leader answered Metadata"
        cluster.kill(leader)
        futures = admin.create_topics(
            [NewTopic("after-the-kill", 3, 2)], request_timeout=30, operation_timeout=20
        )
        futures["after-the-kill"].result(timeout=60)
        md = admin.list_topics("after-the-kill", timeout=10)
        assert sorted(md.topics["after-the-kill"].partitions) == [0, 1, 2]
