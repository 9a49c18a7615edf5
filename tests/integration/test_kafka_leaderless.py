"""A node cut off from the Raft group still points Kafka clients at a leader.

librdkafka asks only brokers it is connected to for Metadata. A client
bootstrapped at an isolated follower used to get leader -1 for every partition
from it, and sent nothing until the partition healed. The node now answers with
the last leader it knew; the client goes there.
"""

from __future__ import annotations

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.kafka_wire import request
from tests.helpers.sink_cluster import SinkCluster

METADATA = 3


def test_isolated_follower_points_clients_at_the_last_leader(tmp_path):
    cluster = SinkCluster(str(tmp_path), default_partitions=2)
    cluster.start()
    try:
        lead = cluster.leader_id()
        follower = next(i for i in cluster.ids if i != lead)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("cut", num_partitions=2, replication_factor=3)])[
            "cut"
        ].result(20)
        cluster.wait_for(
            lambda: cluster.nodes[follower].fsm.topic("cut") is not None, what="topic at follower"
        )
        cluster.net.isolate(follower)
        cluster.wait_for(
            lambda: cluster.nodes[follower].node.leader_id == 0,
            what="the isolated follower to lose its leader",
        )
        md = request(
            cluster.ports[follower],
            METADATA,
            8,
            {
                "topics": [{"name": "cut"}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        (topic,) = md.topics
        assert topic.error_code == 0 and len(topic.partitions) == 2
        for p in topic.partitions:
            assert (p.error_code, p.leader_id) == (0, lead), p
        # The other two nodes still form a quorum: a producer that only knows the
        # isolated node delivers through the leader it was pointed at.
        at_follower = f"127.0.0.1:{cluster.ports[follower]}"
        p = ck.Producer({"bootstrap.servers": at_follower, "acks": "all", "linger.ms": 5})
        errors: list = []
        for k in range(20):
            p.produce("cut", value=b"v%d" % k, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(30) == 0 and not errors, errors
        assert cluster.run(lambda: cluster.nodes[follower].node.leader_id) == 0  # still cut off
    finally:
        cluster.net.heal()
        cluster.stop()
