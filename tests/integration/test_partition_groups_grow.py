"""CreatePartitions with partition groups on real processes: 3 `raftsink serve` nodes
(cluster.partition_groups on), a topic of 3 partitions at replication factor 3 grown to 6
with confluent-kafka's AdminClient (the same CreatePartitions kafka-topics --alter,
KafkaJS and kcat send).

- validate_only changes nothing; a shrink and an equal count answer INVALID_PARTITIONS
  with Kafka's messages; an unknown topic UNKNOWN_TOPIC_OR_PARTITION;
- after the grow, Metadata shows 6 partitions, each with a leader and 3 replicas, and
  every node hosts 6 data groups (the reconciler started the new ones);
- explicit assignments (kafka-topics --replica-assignment) are honoured as given, and a
  bad one answers INVALID_REPLICA_ASSIGNMENT;
- an idempotent acks=all producer writes to every partition; every record is read back
  once, with dense offsets.
Waits are on conditions with deadlines."""

from __future__ import annotations

import asyncio
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import (  # noqa: E402
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from sink.process_cluster import SinkProcessCluster  # noqa: E402
from tests.helpers.kafka_wire import request  # noqa: E402
from tests.helpers.partition_groups import (  # noqa: E402
    create_topic,
    groups_cluster,
    kafka_port,
    metadata,
    produce_acked,
    read_back,
    wait_for,
)

TOPIC = "grow"
NODES = 3
RF = 3


@pytest.fixture
def cluster(tmp_path):
    # New groups' first leaders go to their preferred replicas (a hand-off, at most 3
    # tries); the balancer on test timings moves them there if those failed.
    with groups_cluster(str(tmp_path), NODES, ["--cluster-leader-balance-mute-s", "2"]) as c:
        yield c


def grow(
    admin: AdminClient,
    count: int,
    *,
    topic: str = TOPIC,
    validate_only: bool = False,
    assignments: list[list[int]] | None = None,
) -> KafkaError | None:
    """CreatePartitions -> None (done) or the Kafka error; retried while the controller
    moves (NOT_CONTROLLER; a timeout's outcome is unknown, so after one the topic may
    already have the count, which the caller's later checks see)."""
    new = NewPartitions(topic, count, assignments) if assignments else NewPartitions(topic, count)
    return _admin_call(
        lambda: admin.create_partitions([new], validate_only=validate_only)[topic],
        f"create_partitions {topic} -> {count}",
    )


def _admin_call(send, what: str) -> KafkaError | None:
    """One admin request's future (send() makes a new one) -> None (done) or the Kafka
    error; sent again while the controller moves (NOT_CONTROLLER, REQUEST_TIMED_OUT)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            send().result(timeout=60)
            return None
        except KafkaException as exc:
            err = exc.args[0]
            retriable = (KafkaError.NOT_CONTROLLER, KafkaError.REQUEST_TIMED_OUT)
            if err.code() not in retriable or time.monotonic() > deadline:
                return err
            print(f"{what}: {err}; retrying")
            time.sleep(0.2)


def led_with_replicas(cluster: SinkProcessCluster, count: int):
    """Every node's Metadata shows count partitions, each led, each with RF replicas."""

    def ok() -> bool:
        for node in cluster.alive():
            seen = metadata(kafka_port(cluster, node), TOPIC)
            if len(seen) != count or any(
                lead <= 0 or len(set(reps)) != RF for lead, _, reps in seen.values()
            ):
                return False
        return True

    wait_for(ok, 60, lambda: f"{count} partitions led: {metadata(kafka_port(cluster, 1), TOPIC)}")


def hosted(cluster: SinkProcessCluster) -> dict[int, int]:
    """node -> data groups it hosts (its read API Status; asked again until every live
    node answers: a Status can time out on a loaded machine, which says nothing about
    the groups)."""
    out: dict[int, int] = {}

    def ask() -> bool:
        for node in cluster.alive():
            if node not in out:
                st = asyncio.run(cluster.status(node, timeout=5.0))
                if st is not None:
                    out[node] = (st.get("data_groups") or {}).get("hosted", -1)
        return len(out) == len(cluster.alive())

    wait_for(ask, 60, lambda: f"a Status from every node: {out}")
    return out


def test_grow_a_placed_topic_from_3_to_6_partitions_and_use_them(cluster):
    create_topic(cluster, TOPIC, 3, RF)
    led_with_replicas(cluster, 3)
    # Metadata names leaders from the placement and the leaders table, so a node can
    # answer it before its own reconciler started its replicas: wait for those too.
    wait_for(lambda: set(hosted(cluster).values()) == {3}, 30, lambda: f"hosted {hosted(cluster)}")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})

    # validate_only: answered as the real request would be, nothing changes.
    assert grow(admin, 6, validate_only=True) is None
    shrink = grow(admin, 2)
    assert shrink is not None and shrink.code() == KafkaError.INVALID_PARTITIONS, shrink
    assert "The topic grow currently has 3 partition(s); 2 would not be an increase." in (
        shrink.str()
    )
    same = grow(admin, 3)
    assert same is not None and same.code() == KafkaError.INVALID_PARTITIONS, same
    assert "Topic already has 3 partition(s)." in same.str()
    unknown = grow(admin, 4, topic="nope")
    assert unknown is not None and unknown.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, unknown
    assert len(metadata(kafka_port(cluster, 1), TOPIC)) == 3
    assert set(hosted(cluster).values()) == {3}  # validate_only started no group

    assert grow(admin, 6) is None
    led_with_replicas(cluster, 6)
    wait_for(lambda: set(hosted(cluster).values()) == {6}, 30, lambda: f"hosted {hosted(cluster)}")
    # The new partitions continue the stripe: every node is the preferred replica of 2 of
    # the 6, and leadership spreads over all 3 nodes.
    md = metadata(kafka_port(cluster, 1), TOPIC)
    preferred = sorted(reps[0] for _, _, reps in md.values())
    assert preferred == [1, 1, 2, 2, 3, 3], md

    def leaders() -> dict[int, int]:
        return {p: v[0] for p, v in metadata(kafka_port(cluster, 1), TOPIC).items()}

    wait_for(lambda: set(leaders().values()) == {1, 2, 3}, 60, lambda: f"leaders {leaders()}")

    # Explicit assignments: a bad one is refused whole, a good one is placed as given.
    bad = grow(admin, 7, assignments=[[1, 2, 9]])
    assert bad is not None and bad.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, bad
    assert grow(admin, 7, assignments=[[2, 3, 1]]) is None
    led_with_replicas(cluster, 7)
    assert metadata(kafka_port(cluster, 1), TOPIC)[6][2] == [2, 3, 1]
    md = metadata(kafka_port(cluster, 1), TOPIC)
    print("leader, replicas:", {p: (v[0], v[2]) for p, v in sorted(md.items())})

    partitions = 7
    sent = 700
    rows = produce_acked(cluster.bootstrap_servers, TOPIC, partitions, 0, sent, 60)
    acked = {p: [v for _, v in r] for p, r in rows.items()}
    assert all(len(acked[p]) == sent // partitions for p in range(partitions)), acked.keys()

    got = read_back(
        cluster.bootstrap_servers,
        TOPIC,
        {p: len(acked[p]) for p in range(partitions)},
        60,
        "grow-check",
    )
    for p in range(partitions):
        offsets = [o for o, _ in got[p]]
        assert offsets == list(range(len(acked[p]))), f"partition {p}: offsets {offsets[:5]}..."
        assert sorted(v for _, v in got[p]) == sorted(acked[p]), f"partition {p}"
    # ListOffsets of the new partitions: their end offsets are what was written.
    check = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "x"})
    try:
        ends = [
            check.get_watermark_offsets(TopicPartition(TOPIC, p), 10) for p in range(partitions)
        ]
    finally:
        check.close()
    assert ends == [(0, len(acked[p])) for p in range(partitions)], ends


def _create(admin: AdminClient, topic) -> KafkaError | None:
    """CreateTopics of one NewTopic -> None (created) or the Kafka error; retried while
    the controller moves."""
    return _admin_call(
        lambda: admin.create_topics([topic], operation_timeout=30)[topic.topic],
        f"create_topics {topic.topic}",
    )


def test_create_topics_with_replica_assignments_and_the_configs_tools_set(cluster):
    """kafka-topics --create --replica-assignment (librdkafka's 0081 sends it): the
    topic gets exactly the lists given, in partition order, each led by its first node;
    bad lists answer INVALID_REPLICA_ASSIGNMENT and create nothing; num_partitions
    beside lists is INVALID_REQUEST. The configs frameworks set at creation
    (compression.type, min.insync.replicas, delete.retention.ms, ...) are accepted and
    reported, an unknown one still refused."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    lists = [[2, 3, 1], [3, 1, 2], [1, 2, 3], [2, 1, 3]]
    new = NewTopic(
        "placed",
        len(lists),  # confluent-kafka's rule; the request carries -1 (lists given)
        replica_assignment=lists,
        config={
            "compression.type": "lz4",
            "min.insync.replicas": "2",
            "delete.retention.ms": "900",
            "unclean.leader.election.enable": "false",
        },
    )
    assert _create(admin, new) is None
    wait_for(
        lambda: (
            {p: reps for p, (_, _, reps) in metadata(kafka_port(cluster, 1), "placed").items()}
            == dict(enumerate(lists))
        ),
        60,
        lambda: f"placed as given: {metadata(kafka_port(cluster, 1), 'placed')}",
    )
    wait_for(
        lambda: (
            {p: lead for p, (lead, _, _) in metadata(kafka_port(cluster, 1), "placed").items()}
            == {p: reps[0] for p, reps in enumerate(lists)}
        ),
        60,
        lambda: f"each led by its first node: {metadata(kafka_port(cluster, 1), 'placed')}",
    )
    res = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "placed")])
    described = next(iter(res.values())).result(timeout=30)
    assert described["compression.type"].value == "lz4"
    assert described["min.insync.replicas"].value == "2"
    assert described["delete.retention.ms"].value == "900"

    for bad in ([[1, 1, 2]], [[1, 2, 9]], [[1, 2, 3], [1, 2]]):
        err = _create(admin, NewTopic("refused", len(bad), replica_assignment=bad))
        assert err is not None and err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, (bad, err)
    unknown = _create(admin, NewTopic("refused", 1, 1, config={"dummy.doesntexist": "x"}))
    assert unknown is not None and unknown.code() == KafkaError.INVALID_CONFIG, unknown
    assert metadata(kafka_port(cluster, 1), "refused") == {}

    # num_partitions and lists together: Kafka's INVALID_REQUEST (librdkafka refuses to
    # send it, so the raw request)
    both = {
        "topics": [
            {
                "name": "both",
                "num_partitions": 2,
                "replication_factor": -1,
                "assignments": [
                    {"partition_index": 0, "broker_ids": [1, 2, 3]},
                    {"partition_index": 1, "broker_ids": [2, 3, 1]},
                ],
                "configs": [],
            }
        ],
        "timeout_ms": 30000,
        "validate_only": False,
    }
    codes = {
        n: request(kafka_port(cluster, n), 19, 5, both).topics[0].error_code for n in (1, 2, 3)
    }
    # the controller answers INVALID_REQUEST (42), the others NOT_CONTROLLER (41)
    assert 42 in codes.values() and set(codes.values()) <= {41, 42}, codes
    assert metadata(kafka_port(cluster, 1), "both") == {}
