"""Committed offsets and leader epochs across a leader kill, with real clients and real
`raftsink serve` processes (SinkProcessCluster: real gRPC, real fsync, kill -9).

- confluent-kafka (librdkafka) and kafka-python commit offsets (with metadata and the
  leader epoch), the Raft leader is killed -9, and the new coordinator returns every
  committed offset, metadata and epoch;
- a consumer of each client reads across a leader kill: the new leader's Metadata
  raises the leader epoch, the client validates its position with OffsetForLeaderEpoch
  (KIP-320), and it neither resets nor skips: every record once, offsets dense;
- a transactional producer fails at once with a clear, fatal error (no hang).
One cluster per module; every test uses its own topic and group.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
from confluent_kafka import ConsumerGroupTopicPartitions  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition  # noqa: E402
from kafka.errors import GroupIdNotFoundError  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

from sink.process_cluster import SinkProcessCluster  # noqa: E402
from tests.helpers.kafka_wire import request  # noqa: E402

PARTITIONS = 3


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SinkProcessCluster(
        str(tmp_path_factory.mktemp("offsets")), default_partitions=PARTITIONS
    ) as c:
        yield c


def kill_leader(cluster: SinkProcessCluster) -> int:
    """kill -9 the Raft leader, wait for a new one, restart the victim and wait until every
    node serves again -> the leader."""
    leader = asyncio.run(cluster.wait_ready())
    cluster.kill(leader)
    asyncio.run(cluster.wait_ready(timeout=60, exclude=leader))
    cluster.start(leader)
    # Until the victim listens again, Metadata still lists it (it is a member) and
    # kafka-python's metadata refresh may pick it and fail with ECONNREFUSED (a CI
    # failure): the checks below are about the new coordinator, not a broker down.
    return asyncio.run(cluster.wait_ready(timeout=60))


def produce(cluster: SinkProcessCluster, topic: str, n: int, start: int = 0) -> None:
    p = ck.Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
            "metadata.max.age.ms": 1_000,
        }
    )
    failed: list = []
    for i in range(start, start + n):
        p.produce(
            topic,
            key=b"k%d" % i,
            value=b"v%d" % i,
            partition=i % PARTITIONS,
            on_delivery=lambda e, _m: e and failed.append(e),
        )
        p.poll(0)
    assert p.flush(90) == 0 and not failed, failed[:1]


def create_topic(cluster: SinkProcessCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    fut = admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=30)[topic]
    fut.result(60)


def leader_kafka_port(cluster: SinkProcessCluster) -> int:
    leader = asyncio.run(cluster.wait_ready())
    return int(cluster.peers[leader].kafka.rsplit(":", 1)[1])


def test_committed_offsets_survive_a_leader_kill(cluster):
    topic = "offsets-failover"
    produce(cluster, topic, 60)
    # librdkafka: commit with metadata and the leader epoch of the records consumed.
    c = ck.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "g-librdkafka",
            "enable.auto.commit": False,
        }
    )
    tps = [
        ck.TopicPartition(topic, p, 10 + p, metadata=f"ck-{p}", leader_epoch=1)
        for p in range(PARTITIONS)
    ]
    committed = c.commit(offsets=tps, asynchronous=False)
    assert all(tp.error is None for tp in committed), committed
    c.close()
    # kafka-python: commit through its own OffsetCommit path.
    kp = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id="g-kafka-python",
        enable_auto_commit=False,
    )
    kp_tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    kp.assign(kp_tps)
    kp.commit({tp: OffsetAndMetadata(20 + tp.partition, f"kp-{tp.partition}", 1) for tp in kp_tps})
    kp.close()

    kill_leader(cluster)

    # The new coordinator (another node) has every offset, metadata and epoch.
    c = ck.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "g-librdkafka",
            "enable.auto.commit": False,
        }
    )
    got = c.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    c.close()
    assert [(tp.partition, tp.offset, tp.metadata, tp.leader_epoch) for tp in got] == [
        (p, 10 + p, f"ck-{p}", 1) for p in range(PARTITIONS)
    ]
    kp = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id="g-kafka-python",
        enable_auto_commit=False,
    )
    try:
        for tp in kp_tps:
            om = kp.committed(tp, metadata=True)
            assert (om.offset, om.metadata, om.leader_epoch) == (
                20 + tp.partition,
                f"kp-{tp.partition}",
                1,
            )
    finally:
        kp.close()
    # OffsetFetch straight at the new leader (v8, several groups) agrees.
    port = leader_kafka_port(cluster)
    resp = request(
        port,
        9,
        8,
        {
            "groups": [
                {"group_id": g, "topics": [{"name": topic, "partition_indexes": [0, 1, 2]}]}
                for g in ("g-librdkafka", "g-kafka-python", "g-none")
            ],
            "require_stable": False,
        },
    )
    offsets = {
        g.group_id: [p.committed_offset for p in g.topics[0].partitions] for g in resp.groups
    }
    assert offsets == {
        "g-librdkafka": [10, 11, 12],
        "g-kafka-python": [20, 21, 22],
        "g-none": [-1, -1, -1],
    }


def test_admin_clients_list_and_delete_group_offsets(cluster):
    """kafka-python's admin lists several groups at once (OffsetFetch v8) and deletes one
    partition's offset (OffsetDelete); confluent's admin reads the result back."""
    topic = "offsets-admin"
    create_topic(cluster, topic)
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "adm-a"})
    c.commit(offsets=[ck.TopicPartition(topic, p, 5 + p) for p in range(3)], asynchronous=False)
    c.close()
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "adm-b"})
    c.commit(offsets=[ck.TopicPartition(topic, 1, 9)], asynchronous=False)
    c.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        listed = admin.list_group_offsets({"adm-a": None, "adm-b": None})
        assert {
            g: {tp.partition: om.offset for tp, om in offs.items()} for g, offs in listed.items()
        } == {
            "adm-a": {0: 5, 1: 6, 2: 7},
            "adm-b": {1: 9},
        }
        result = admin.delete_group_offsets("adm-a", [TopicPartition(topic, 0)])
        assert [e.errno for e in result.values()] == [0], result
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("adm-none", [TopicPartition(topic, 0)])
    finally:
        admin.close()
    ca = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    req = ConsumerGroupTopicPartitions("adm-a", [ck.TopicPartition(topic, p) for p in range(3)])
    res = ca.list_consumer_group_offsets([req])["adm-a"].result(30)
    assert [tp.offset for tp in res.topic_partitions] == [ck.OFFSET_INVALID, 6, 7]


def _consume_across_kill(cluster, topic: str, poll_batch) -> list[tuple[int, int, bytes]]:
    """Produce 150, read them, kill the leader, produce 150 more (the new term), read on:
    -> every (partition, offset, value) read, in order of arrival."""
    produce(cluster, topic, 150)
    got: list[tuple[int, int, bytes]] = []
    wait_for(lambda: poll_batch(got) or len(got) >= 150, 60, "the first 150 records")
    kill_leader(cluster)
    produce(cluster, topic, 150, start=150)
    wait_for(lambda: poll_batch(got) or len(got) >= 300, 90, "the records of the new term")
    return got


def _check_exactly_once(got: list[tuple[int, int, bytes]]) -> None:
    by_part: dict[int, list[tuple[int, bytes]]] = {}
    for p, off, value in got:
        by_part.setdefault(p, []).append((off, value))
    assert len(got) == 300, f"{len(got)} records read (duplicates or a reset?)"
    for p, recs in by_part.items():
        assert [o for o, _ in recs] == list(range(len(recs))), f"partition {p}: not dense"
        assert [v for _, v in recs] == [b"v%d" % i for i in range(p, 300, PARTITIONS)]


class _ListLogger(logging.Logger):
    """librdkafka's log lines (confluent-kafka calls logger.log) into a list."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("librdkafka", logging.DEBUG)
        self.lines = lines

    def log(self, level, msg, *args, **kw) -> None:
        self.lines.append(msg % args if args else msg)


def test_librdkafka_validates_its_position_after_a_leader_kill(cluster):
    topic = "epochs-librdkafka"
    rdlog: list[str] = []
    c = ck.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "g-epochs-ck",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 500,
            "fetch.wait.max.ms": 100,
            "debug": "fetch,consumer",  # VALIDATE / OFFSETVALID lines: the validation really ran
        },
        logger=_ListLogger(rdlog),
    )
    create_topic(cluster, topic)
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    errors: list = []

    def poll_batch(got: list) -> bool:
        for msg in c.consume(100, 0.2):
            if msg.error() is not None:
                errors.append(msg.error())
            else:
                got.append((msg.partition(), msg.offset(), msg.value()))
        return False

    try:
        got = _consume_across_kill(cluster, topic, poll_batch)
    finally:
        c.close()
    assert not errors, errors[:3]
    _check_exactly_once(got)
    validated = [line for line in rdlog if "validation succeeded" in line]
    epoch_lines = [ln for ln in rdlog if "epoch" in ln.lower() or "VALIDAT" in ln.upper()]
    assert validated, (
        "librdkafka never validated a position (OffsetForLeaderEpoch unused); its epoch lines:\n"
        + "\n".join(epoch_lines[-40:])
    )


def test_kafka_python_validates_its_position_after_a_leader_kill(cluster, caplog):
    caplog.set_level(logging.DEBUG, logger="kafka.consumer.fetcher")
    topic = "epochs-kafka-python"
    create_topic(cluster, topic)
    kp = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id="g-epochs-kp",
        enable_auto_commit=False,
        metadata_max_age_ms=500,
        fetch_max_wait_ms=100,
    )
    kp.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    kp.seek_to_beginning()

    def poll_batch(got: list) -> bool:
        for tp, recs in kp.poll(200).items():
            got.extend((tp.partition, r.offset, r.value) for r in recs)
        return False

    try:
        got = _consume_across_kill(cluster, topic, poll_batch)
    finally:
        kp.close()
    _check_exactly_once(got)
    sent = [r for r in caplog.records if "Sending OffsetForLeaderEpoch" in r.getMessage()]
    assert sent, "kafka-python never validated its position (OffsetForLeaderEpoch unused)"


def partition0(port: int, topic: str):
    """Partition 0 as the node at port answers Metadata (v12)."""
    meta = request(
        port,
        3,
        12,
        {
            "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    return meta.topics[0].partitions[0]


def leader_epoch(port: int, topic: str) -> int:
    """Partition 0's leader epoch as Metadata (v12) reports it."""
    return partition0(port, topic).leader_epoch


def kafka_port(cluster: SinkProcessCluster, node: int) -> int:
    return int(cluster.peers[node].kafka.rsplit(":", 1)[1])


def partition0_leader(cluster: SinkProcessCluster, topic: str, exclude: int = -1):
    """(leader, epoch) of partition 0 as the node that leads it says (with one Raft group
    the cluster's leader; with partition groups its data group's), None while no live
    node other than `exclude` confirms it."""
    for node in sorted(set(cluster.alive()) - {exclude}):
        try:
            p = partition0(kafka_port(cluster, node), topic)
        except OSError:
            continue
        lead = p.leader_id
        if p.error_code == 0 and lead > 0 and lead != exclude and lead in cluster.alive():
            try:
                own = partition0(kafka_port(cluster, lead), topic)
            except OSError:
                continue
            if own.leader_id == lead:
                return lead, own.leader_epoch
    return None


def _await_partition0_leader(cluster: SinkProcessCluster, topic: str) -> tuple[int, int]:
    found: list = []
    wait_for(lambda: found.append(partition0_leader(cluster, topic)) or found[-1], 30, "a leader")
    return found[-1]


def kill_partition0_leader(cluster: SinkProcessCluster, topic: str) -> int:
    """kill -9 the node leading partition 0, wait for another node to lead it at a higher
    epoch, restart the victim and wait until every node serves again -> the new leader."""
    found: list = []
    victim, epoch = _await_partition0_leader(cluster, topic)
    cluster.kill(victim)

    def moved() -> bool:
        now = partition0_leader(cluster, topic, exclude=victim)
        found.append(now)
        return now is not None and now[1] > epoch

    wait_for(moved, 60, "partition 0 to get a new leader")
    cluster.start(victim)
    asyncio.run(cluster.wait_ready(timeout=60))
    return found[-1][0]


def test_offset_for_leader_epoch_answers_from_the_term_table(cluster):
    """Raw OffsetForLeaderEpoch at the leader after a kill: the old term ends where the new
    term's records begin; the current term ends at the high watermark; an older
    current_leader_epoch is fenced, a newer one unknown."""
    topic = "epochs-raw"
    produce(cluster, topic, 30)
    # Partition 0's leader: the Raft leader with one group, its data group's leader with
    # partition groups (the controller's leader may lead another partition, or none).
    old_term = _await_partition0_leader(cluster, topic)[1]
    kill_partition0_leader(cluster, topic)
    produce(cluster, topic, 30, start=30)

    def ofle(port: int, epoch: int, current: int = -1):
        r = request(
            port,
            23,
            4,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}
                        ],
                    }
                ],
            },
        )
        p = r.topics[0].partitions[0]
        return int(p.error_code), p.leader_epoch, p.end_offset

    # The leader balancer may hand partition 0 back to the restarted victim at any moment
    # (a new term, and NOT_LEADER_OR_FOLLOWER at the old leader): take one stable view,
    # i.e. a leader whose term is the same before and after the four questions.
    for _ in range(20):
        leader, _ = _await_partition0_leader(cluster, topic)
        port = kafka_port(cluster, leader)
        term = leader_epoch(port, topic)
        answers = (
            ofle(port, term, term),
            ofle(port, old_term),
            ofle(port, term, term - 1),
            ofle(port, term, term + 1),
        )
        if all(a[0] != 6 for a in answers) and leader_epoch(port, topic) == term:
            break
    else:
        raise AssertionError("partition 0's leadership never held still for four requests")
    assert term > old_term
    assert answers[0] == (0, term, 20)  # partition 0 holds records 0, 3, ... 57
    err, epoch, end = answers[1]
    assert (err, end) == (0, 10) and epoch <= old_term  # where the new term's records begin
    assert answers[2][0] == 74  # FENCED_LEADER_EPOCH
    assert answers[3][0] == 75  # UNKNOWN_LEADER_EPOCH


def test_transactional_producer_fails_at_once(cluster):
    p = ck.Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "txn-refused"}
    )
    start = time.monotonic()
    with pytest.raises(ck.KafkaException) as info:
        p.init_transactions(30)
    took = time.monotonic() - start
    err = info.value.args[0]
    assert err.code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert err.fatal() and not err.retriable()
    assert took < 15, f"init_transactions took {took:.1f} s: a retry loop, not a clear error"
