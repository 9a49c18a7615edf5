"""A node cut off from the Raft group still points Kafka clients at a leader.

librdkafka asks only brokers it is connected to for Metadata. A client
bootstrapped at an isolated follower used to get leader -1 for every partition
from it, and sent nothing until the partition healed. The node now answers with
the last leader it knew; the client goes there.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.kafka_wire import request
from tests.helpers.sink_cluster import SinkCluster

METADATA = 3


@contextlib.contextmanager
def leader_and_follower(tmp_path, partitions: int) -> Iterator[tuple[SinkCluster, int, int]]:
    """An in-process 3-node cluster, its leader and one follower; healed and stopped after."""
    cluster = SinkCluster(str(tmp_path), default_partitions=partitions)
    cluster.start()
    try:
        lead = cluster.leader_id()
        yield cluster, lead, next(i for i in cluster.ids if i != lead)
    finally:
        cluster.net.heal()
        cluster.stop()


def test_isolated_follower_points_clients_at_the_last_leader(tmp_path):
    with leader_and_follower(tmp_path, 2) as (cluster, _, follower):
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
        # The last leader it knew: the first one, or the next if a stall of this process
        # (three nodes in one) let an election move the lead before the cut (seen under
        # load); if that was this node itself, another node (SinkService.leader_hint).
        last = cluster.run(lambda: cluster.nodes[follower].node.last_leader_id)
        assert last in cluster.ids, last
        pointed = last if last != follower else min(i for i in cluster.ids if i != follower)
        (topic,) = md.topics
        assert topic.error_code == 0 and len(topic.partitions) == 2
        for p in topic.partitions:
            assert (p.error_code, p.leader_id) == (0, pointed), p
        # The other two nodes still form a quorum: a producer that only knows the
        # isolated node delivers through the leader it was pointed at.
        at_follower = f"127.0.0.1:{cluster.ports[follower]}"
        p = ck.Producer({"bootstrap.servers": at_follower, "acks": "all", "linger.ms": 5})
        errors: list = []
        for k in range(20):
            p.produce("cut", value=b"v%d" % k, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(30) == 0 and not errors, errors
        assert cluster.run(lambda: cluster.nodes[follower].node.leader_id) == 0  # still cut off


FETCH = 1


def fetch_raw(port: int, topic: str, offset: int, epoch: int = -1):
    """One Fetch v12 for partition 0 of topic; returns that partition's response."""
    resp = request(
        port,
        FETCH,
        12,
        {
            "cluster_id": None,
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": epoch,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    ((part,),) = [t.partitions for t in resp.responses]
    return part


def test_only_a_node_that_knows_says_offset_out_of_range(tmp_path):
    """A lagging follower sends a consumer to the leader instead of making it reset."""
    with leader_and_follower(tmp_path, 1) as (cluster, _, follower):
        p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 1})
        for k in range(10):
            p.produce("lag", value=b"a%d" % k, partition=0)
        assert p.flush(30) == 0
        fsm = cluster.nodes[follower].fsm
        cluster.wait_for(lambda: fsm.high_watermark("lag", 0) == 10, what="follower at 10")
        cluster.net.isolate(follower)
        for k in range(10):
            p.produce("lag", value=b"b%d" % k, partition=0)
        assert p.flush(30) == 0  # the leader and the other follower commit 10..19
        assert cluster.run(lambda: fsm.high_watermark("lag", 0)) == 10

        behind = fetch_raw(cluster.ports[follower], "lag", 15)
        assert int(behind.error_code) == 6  # NOT_LEADER_OR_FOLLOWER, not OFFSET_OUT_OF_RANGE
        served = fetch_raw(cluster.ports[follower], "lag", 5)  # committed data it has
        assert int(served.error_code) == 0 and served.high_watermark == 10 and served.records

        # At the leader (surely absent: OFFSET_OUT_OF_RANGE), with no epoch, its own, and a
        # later one (a client that saw a later leader: this one may be deposed; not a
        # reset: UNKNOWN_LEADER_EPOCH 75; 76, asserted here before, is
        # UNSUPPORTED_COMPRESSION_TYPE).
        assert _at_the_leader(cluster, follower, 25, None) == 1
        assert _at_the_leader(cluster, follower, 25, 0) == 1
        assert _at_the_leader(cluster, follower, 25, 1) == 75


def _at_the_leader(cluster: SinkCluster, cut_off: int, offset: int, epoch_ahead: int | None) -> int:
    """Fetch's error code for offset at the leader (current_leader_epoch: none, or its term
    plus epoch_ahead). Asked again while the answer is NOT_LEADER_OR_FOLLOWER: the three
    nodes share one process, and a stall of it past the leader's lease makes the leader
    refuse to serve until it is sure it still leads (or an election moves the lead to the
    other connected node; scan under load: 6 here)."""
    deadline = time.monotonic() + 30
    while True:
        lead = cluster.leader_id(exclude=cut_off)
        term = cluster.run(lambda lead=lead: cluster.nodes[lead].node.core.term)
        epoch = -1 if epoch_ahead is None else term + epoch_ahead
        code = int(fetch_raw(cluster.ports[lead], "lag", offset, epoch=epoch).error_code)
        if code != 6 or time.monotonic() > deadline:
            return code
        time.sleep(0.1)
