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

import pytest

pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import AdminClient, NewTopic

from sink.cli_members import call
from tests.helpers.partition_groups import groups_cluster, kafka_port


def _create_topics_seen(cluster, node: int) -> int:
    st = asyncio.run(cluster.status(node, timeout=10)) or {}
    return ((st.get("kafka_requests") or {}).get("CreateTopics") or {}).get("count", 0)


def test_an_admin_client_goes_on_after_the_raft_leader_is_killed(tmp_path):
    """A client whose controller (the node it asked) is not the Raft leader creates a
    topic after the leader is killed: the relay waits for the next controller."""
    with groups_cluster(str(tmp_path), 3) as cluster:
        leader = asyncio.run(cluster.wait_ready(60))  # the controller group's leader
        port = kafka_port(cluster, next(n for n in cluster.nodes if n != leader))
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
        md = admin.list_topics(timeout=10)
        assert md.controller_id in cluster.nodes, md.controller_id
        assert sorted(md.brokers) == sorted(cluster.nodes)
        # librdkafka's controller is whatever its last Metadata answer named, and that
        # answer may come from any broker it is connected to (each names itself; CI: 30 s
        # of answers naming only the Raft leader), so read it from where a request lands,
        # after one request, so that no connection is still to come (each one's Metadata
        # names its node). A follower relays the frame to the leader's listener, which
        # counts it too: the client's controller is the one node that counted it, or the
        # one of two that does not lead.
        before = {n: _create_topics_seen(cluster, n) for n in cluster.nodes}
        admin.create_topics([NewTopic("warm", 1, 2)], operation_timeout=20)["warm"].result(60)
        got = [n for n in cluster.nodes if _create_topics_seen(cluster, n) > before[n]]
        leader = asyncio.run(cluster.wait_ready(60))
        assert len(got) == 1 or (len(got) == 2 and leader in got), (got, leader)
        controller = got[0] if len(got) == 1 else next(n for n in got if n != leader)
        if controller == leader:  # the Raft lead moves off the client's controller
            other = next(n for n in cluster.nodes if n != controller)
            nodes = [cluster.peers[n].read_api for n in cluster.nodes]
            _, code, error = asyncio.run(call(nodes, {"op": "transfer", "node": other}, 60))
            assert not code, (code, error)
            leader = asyncio.run(cluster.wait_ready(60))
        assert leader != controller
        cluster.kill(leader)
        futures = admin.create_topics(
            [NewTopic("after-the-kill", 3, 2)], request_timeout=30, operation_timeout=20
        )
        futures["after-the-kill"].result(timeout=60)
        md = admin.list_topics("after-the-kill", timeout=10)
        assert sorted(md.topics["after-the-kill"].partitions) == [0, 1, 2]
