"""Helpers of the partition-groups integration tests (real `raftsink serve` processes
with `cluster.partition_groups` on): a cluster on test timings, Metadata as a node
answers it, CreateTopics retried while the controller moves."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sink.process_cluster import SinkProcessCluster
from tests.helpers.kafka_wire import metadata_of

BALANCE_ON_TEST_TIMINGS = [
    "--cluster-leader-balance-interval-s",
    "1",
    "--cluster-leader-balance-return-delay-s",
    "2",
]
"""The leader balancer on test timings (defaults: a round every 10 s, a returning replica
waits 30 s): a restarted node gets its share back, and a new group whose first hand-off
to its preferred replica failed is moved there, within a test."""


@contextlib.contextmanager
def groups_cluster(
    base: str, nodes: int, extra_args: Sequence[str] = ()
) -> Iterator[SinkProcessCluster]:
    """`nodes` processes with partition groups on, ready (a leader), stopped after."""
    c = SinkProcessCluster(
        base,
        n=nodes,
        partition_groups=True,
        log_level="INFO",
        extra_args=[*BALANCE_ON_TEST_TIMINGS, *extra_args],
    )
    c.start()
    try:
        asyncio.run(c.wait_ready(timeout=120))
        yield c
    finally:
        c.stop()


def wait_for(cond, timeout: float, what, poll=None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out waiting for {detail}")
        if poll is not None:
            poll(0.05)
        else:
            time.sleep(0.05)


def metadata(port: int, topic: str) -> dict[int, tuple[int, int, list[int]]]:
    """partition -> (leader, leader epoch, replicas) as the node at port answers."""
    md = metadata_of(port, topic)
    out = {}
    for t in md.topics:
        if t.name == topic and t.error_code == 0:
            for p in t.partitions:
                out[p.partition_index] = (p.leader_id, p.leader_epoch, list(p.replica_nodes))
    return out


def isrs(bootstrap: str, topic: str) -> dict[int, list[int]]:
    """partition -> ISR as one node's Metadata answers it, through librdkafka's admin
    client (a real client's reading of isr_nodes); {} when the node does not answer."""
    # log_level 0: a cluster with a killed node would fill the output with connect errors
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        md = admin.list_topics(topic, timeout=5)
    except KafkaException:
        return {}
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p: sorted(info.isrs) for p, info in t.partitions.items()}


def kafka_port(cluster: SinkProcessCluster, node: int) -> int:
    return int(cluster.peers[node].kafka.rsplit(":", 1)[1])


def create_topic(cluster: SinkProcessCluster, name: str, partitions: int, rf: int) -> None:
    """CreateTopics, retried while the controller moves (NOT_CONTROLLER, a timeout: the
    outcome is unknown, so TOPIC_ALREADY_EXISTS after such a retry means created).
    librdkafka's own timeout (_TIMED_OUT, "waiting for controller": its cached
    controller was not reachable) counts as a timeout too; each attempt is bounded so
    that a retry fits in the deadline. Each attempt uses a new client: librdkafka reads
    the controller again only on its periodic refresh (5 min), so a retry through the
    same client would go to the same node."""
    retriable = (
        confluent_kafka.KafkaError.NOT_CONTROLLER,
        confluent_kafka.KafkaError.REQUEST_TIMED_OUT,
        confluent_kafka.KafkaError._TIMED_OUT,
    )
    retried = False
    deadline = time.monotonic() + 90
    while True:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        try:
            futures = admin.create_topics([NewTopic(name, partitions, rf)], request_timeout=20)
            futures[name].result(timeout=30)
            return
        except KafkaException as exc:
            code = exc.args[0].code()
            if retried and code == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if code not in retriable or time.monotonic() > deadline:
                raise
            print(f"create {name}: {exc}; retrying")
            retried = True
            time.sleep(0.2)


def read_back(
    bootstrap: str, topic: str, expected: dict[int, int], timeout: float, group: str
) -> dict[int, list[tuple[int, bytes]]]:
    """Read every partition of topic from offset 0 until each holds at least expected[p]
    records -> partition -> [(offset, value)] in the order read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in expected])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}

    def read_more(_timeout: float) -> None:
        msg = consumer.poll(0.2)
        if msg is not None:
            if msg.error() is not None:
                raise KafkaException(msg.error())
            got[msg.partition()].append((msg.offset(), msg.value()))

    try:
        wait_for(
            lambda: all(len(got[p]) >= n for p, n in expected.items()),
            timeout,
            lambda: f"consumed {[len(got[p]) for p in got]} of {expected}",
            read_more,
        )
    finally:
        consumer.close()
    return got


def produce_acked(
    bootstrap: str, topic: str, partitions: int, first: int, n: int, timeout: float = 120.0
) -> dict[int, list[tuple[int, bytes]]]:
    """Records first..first+n-1 (value b"v<i>", partition i % partitions) from an idempotent
    acks=all producer -> partition -> [(offset, value)] acknowledged. Every delivery must
    succeed within timeout (the test fails otherwise)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": int(timeout * 1000) - 1000,
            "socket.timeout.ms": 5_000,
            "metadata.max.age.ms": 1_000,
        }
    )
    acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    failed: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[msg.partition()].append((msg.offset(), msg.value()))

    for i in range(first, first + n):
        value = f"v{i}".encode()
        producer.produce(topic, value=value, partition=i % partitions, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(timeout) == 0, f"records still in flight after {timeout:.0f} s"
    assert not failed, f"{len(failed)} deliveries failed, first: {failed[0]}"
    assert sum(len(v) for v in acked.values()) == n
    return acked
