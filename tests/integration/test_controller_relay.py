"""A controller request sent to a node that is no longer the controller is relayed to
the controller, with a real client: confluent-kafka's AdminClient (librdkafka) learns
the controller from Metadata once and reads it again only on its periodic refresh
(5 min by default), so after a leader change it sends CreateTopics, CreatePartitions,
IncrementalAlterConfigs and DeleteTopics to the old controller. Each must succeed (a CI failure:
90 s of NOT_CONTROLLER from a stale controller after an early re-election). Every node
names itself the controller (KIP-590): the client here knows only the leader's address,
so its controller is the node that leads at first.

A real 3-node cluster of in-process nodes (real TCP, real fsync); leadership is moved
by a Raft leadership transfer. That the requests reached the old controller is read
from its own per-API request counts (KafkaServer.request_seconds)."""

from __future__ import annotations

import pytest

from tests.helpers.sink_cluster import SinkCluster, steady_cluster

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # STEADY's one-second election timeout keeps the leader put between the transfer
    # and the requests on a loaded machine.
    base = str(tmp_path_factory.mktemp("relay"))
    with steady_cluster(base, auto_create_topics=False) as c:
        yield c


def requests_seen(cluster: SinkCluster, node: int, api: str) -> int:
    def count() -> int:
        kafka = cluster.nodes[node].kafka
        assert kafka is not None
        hist = kafka.request_seconds.get(api)
        return 0 if hist is None else hist.count

    return cluster.run(count)


def move_leadership(cluster: SinkCluster, old: int) -> int:
    new = next(i for i in cluster.ids if i != old)
    cluster.call(cluster.nodes[old].service.node.transfer_leader(new, timeout=30), timeout=40)
    return cluster.leader_id(timeout=30, exclude=old)


def test_admin_requests_to_the_old_controller_are_relayed(cluster):
    first = cluster.leader_id()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.ports[first]}"})
    admin.list_topics(timeout=10)
    # librdkafka's controller from now on is the node its last Metadata answer named, and
    # that answer may come from any broker it is connected to (each names itself; CI: 30 s
    # of answers naming a follower), so read it from where a request lands. librdkafka
    # also reads Metadata again when a connection to a broker comes up: one request
    # first, so that no connection is still to come. A follower relays the frame to the
    # leader's listener, which counts it too: the client's controller is the one node that
    # counted it, or the one that is not the leader.
    counts = {i: requests_seen(cluster, i, "CreateTopics") for i in cluster.ids}
    admin.create_topics([NewTopic("warm", 1, 1)], operation_timeout=20)["warm"].result(30)
    got = [i for i in cluster.ids if requests_seen(cluster, i, "CreateTopics") > counts[i]]
    leader = cluster.leader_id()
    assert len(got) == 1 or (len(got) == 2 and leader in got), (got, leader)
    old = got[0] if len(got) == 1 else next(i for i in got if i != leader)
    # The client's controller must not lead when the requests go: move the lead if it does.
    new = move_leadership(cluster, old) if old == leader else leader
    assert new != old
    before = {
        api: requests_seen(cluster, old, api)
        for api in ("CreateTopics", "CreatePartitions", "IncrementalAlterConfigs", "DeleteTopics")
    }

    admin.create_topics([NewTopic("relayed", 1, 1)], operation_timeout=20)["relayed"].result(30)
    admin.create_partitions([NewPartitions("relayed", 3)], operation_timeout=20)["relayed"].result(
        30
    )
    entry = ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource(ConfigResource.Type.TOPIC, "relayed", incremental_configs=[entry])
    admin.incremental_alter_configs([res])[res].result(30)

    cluster.wait_for(
        lambda: all(
            (t := sn.service.fsm.topic("relayed")) is not None and t.partitions == 3
            for sn in cluster.nodes.values()
        ),
        30,
        "three partitions on every node",
    )
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("relayed", timeout=10)
    assert md.topics["relayed"].error is None
    assert sorted(md.topics["relayed"].partitions) == [0, 1, 2]
    admin.delete_topics(["relayed"], operation_timeout=20)["relayed"].result(30)

    after = {api: requests_seen(cluster, old, api) for api in before}
    # each request went to the old controller (librdkafka did not look again) ...
    assert all(after[api] == before[api] + 1 for api in before), (before, after)
    # ... which no longer led, and passed the controller's answers on
    # the delete is applied on the controller when answered, on the others soon after
    # (a fresh client's Metadata may go to any of them)
    cluster.wait_for(
        lambda: all(sn.service.fsm.topic("relayed") is None for sn in cluster.nodes.values()),
        30,
        "the delete applied on every node",
    )
    md = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    assert "relayed" not in md.topics and "warm" in md.topics
