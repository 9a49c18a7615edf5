"""Topic admin and timestamp lookups with real clients against a real 3-node raftsink
cluster (in-process nodes, real TCP, real fsync): confluent-kafka's AdminClient and
consumer (librdkafka), kafka-python's KafkaAdminClient and consumer, and kcat -Q.

Timestamps: batches with out-of-order CreateTime, compressed with each codec, lookups
before the first record, inside a batch, after the last, and after DeleteRecords
removed the start; every answer is compared with a brute-force scan of what was
produced. Admin: create partitions (and refusing fewer), delete records (and
refusing beyond the high watermark), describe cluster and log dirs, delete topics
(also while a producer is writing to it).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
import time

import pytest

from tests.helpers.kafka_wire import topic_ready_at
from tests.helpers.sink_cluster import STEADY, SinkCluster, steady_cluster

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

# Record timestamps in produce order: not monotonic inside a batch or across batches.
TIMES = [5000, 3000, 9000, 1000, 7000, 8000, 2000]
LATER = [10_000, 6000]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("sink"))
    with steady_cluster(base, auto_create_topics=False) as c:
        yield c


def admin(cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def create(cluster, topic: str, partitions: int = 1) -> None:
    """The records here carry 1970 timestamps, which the default retention.ms (7 days)
    expires at the next retention check (every 30 s), as Kafka would: a check landing
    between produce and a lookup moved the log start (a CI failure). Time retention is
    off on these topics; test_topic_retention tests it."""
    a = admin(cluster)  # kept alive until the answer: a destroyed client fails its futures
    topics = [NewTopic(topic, partitions, config={"retention.ms": "-1"})]
    fs = a.create_topics(topics, operation_timeout=30)
    fs[topic].result(timeout=30)


def produce_timed(cluster, topic: str, compression: str) -> list[int]:
    """TIMES as one batch, then LATER as another; returns every record's timestamp by offset."""
    p = ck.Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "linger.ms": 200,
            "compression.type": compression,
            "enable.idempotence": True,
        }
    )
    errors: list = []
    for group in (TIMES, LATER):
        for ts in group:
            p.produce(
                topic, value=b"v%d" % ts, timestamp=ts, on_delivery=lambda e, m: errors.append(e)
            )
        assert p.flush(60) == 0
    assert errors == [None] * (len(TIMES) + len(LATER))
    return TIMES + LATER


def brute(times: list[int], ts: int, start: int = 0) -> int:
    for off, t in enumerate(times):
        if off >= start and t >= ts:
            return off
    return -1


QUERIES = [0, 999, 1000, 2500, 5000, 5001, 8500, 9000, 9001, 10_000, 10_001]


def confluent_lookup(cluster, topic: str, ts: int) -> int:
    c = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lookup"})
    try:
        (tp,) = c.offsets_for_times([ck.TopicPartition(topic, 0, ts)], timeout=30)
        assert tp.error is None, tp.error
        return tp.offset
    finally:
        c.close()


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_offsets_for_times(cluster, compression):
    topic = f"times-{compression}"
    create(cluster, topic)
    times = produce_timed(cluster, topic, compression)
    for ts in QUERIES:
        assert confluent_lookup(cluster, topic, ts) == brute(times, ts), (compression, ts)


def test_lookups_after_delete_records_and_admin_list_offsets(cluster):
    topic = "times-deleted"
    create(cluster, topic)
    times = produce_timed(cluster, topic, "lz4")
    a = admin(cluster)
    tp = ck.TopicPartition(topic, 0, 3)
    (res,) = a.delete_records([tp], operation_timeout=30).values()
    assert res.result(timeout=30).low_watermark == 3
    for ts in QUERIES:
        assert confluent_lookup(cluster, topic, ts) == brute(times, ts, start=3), ts
    from confluent_kafka.admin import OffsetSpec

    spec = {ck.TopicPartition(topic, 0): OffsetSpec.max_timestamp()}
    (fut,) = a.list_offsets(spec).values()
    r = fut.result(timeout=30)
    assert (r.offset, r.timestamp) == (7, 10_000)
    spec = {ck.TopicPartition(topic, 0): OffsetSpec.earliest()}
    (fut,) = a.list_offsets(spec).values()
    assert fut.result(timeout=30).offset == 3


def test_kafka_python_offsets_for_times(cluster):
    kafka = pytest.importorskip("kafka")
    topic = "times-kafka-python"
    create(cluster, topic)
    times = produce_timed(cluster, topic, "gzip")
    c = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap)
    try:
        tp = kafka.TopicPartition(topic, 0)
        for ts in QUERIES:
            got = c.offsets_for_times({tp: ts})[tp]
            want = brute(times, ts)
            if want < 0:
                assert got is None, ts
            else:
                assert (got.offset, got.timestamp) == (want, times[want]), ts
    finally:
        c.close()


def test_kcat_query_by_timestamp(cluster):
    from tests.helpers.client_tools import kcat_path

    kcat = kcat_path()
    topic = "times-kcat"
    create(cluster, topic)
    times = produce_timed(cluster, topic, "snappy")
    for ts in (0, 2500, 9001, 10_001):
        deadline = time.monotonic() + 60
        while True:  # kcat -Q does not retry a leader change (load elections): we do
            r = subprocess.run(
                [kcat, "-b", cluster.bootstrap, "-Q", "-t", f"{topic}:0:{ts}"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if r.returncode == 0 or "Not leader" not in r.stderr:
                break
            assert time.monotonic() < deadline, r.stderr
            cluster.leader_id()
        assert r.returncode == 0, r.stderr
        m = re.search(r"offset (-?\d+)", r.stdout)
        assert m is not None, r.stdout
        assert int(m.group(1)) == brute(times, ts), (ts, r.stdout)


def test_confluent_admin_partitions_records_cluster_delete(cluster):
    a = admin(cluster)
    topic = "admin-confluent"
    create(cluster, topic, 2)
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        p.produce(topic, value=b"x%d" % i, partition=0)
    assert p.flush(30) == 0
    # Fewer partitions: refused, nothing changes.
    (fut,) = a.create_partitions([NewPartitions(topic, 1)]).values()
    with pytest.raises(ck.KafkaException) as exc:
        fut.result(timeout=30)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_PARTITIONS
    (fut,) = a.create_partitions([NewPartitions(topic, 4)], validate_only=True).values()
    fut.result(timeout=30)
    (fut,) = a.create_partitions([NewPartitions(topic, 4)]).values()
    fut.result(timeout=30)
    md = a.list_topics(topic, timeout=30).topics[topic]
    assert sorted(md.partitions) == [0, 1, 2, 3]
    # DeleteRecords beyond the high watermark: OFFSET_OUT_OF_RANGE.
    (fut,) = a.delete_records([ck.TopicPartition(topic, 0, 11)]).values()
    with pytest.raises(ck.KafkaException) as exc:
        fut.result(timeout=30)
    assert exc.value.args[0].code() == ck.KafkaError.OFFSET_OUT_OF_RANGE
    (fut,) = a.delete_records([ck.TopicPartition(topic, 0, 4)]).values()
    assert fut.result(timeout=30).low_watermark == 4
    lo, hi = ck.Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "wm"}
    ).get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=30)
    assert (lo, hi) == (4, 10)
    desc = a.describe_cluster().result(timeout=30)
    assert desc.cluster_id == "raftsink-test"
    assert sorted(n.id for n in desc.nodes) == sorted(cluster.nodes)
    # the answering node names itself: it relays controller requests (KIP-590)
    assert desc.controller is not None and desc.controller.id in cluster.nodes
    (fut,) = a.delete_topics([topic], operation_timeout=30).values()
    fut.result(timeout=30)
    cluster.wait_for(
        lambda: all(sn.fsm.topic(topic) is None for sn in cluster.nodes.values()),
        what="the topic gone on every node",
    )


def test_kafka_python_admin(cluster):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KNewPartitions
    from kafka.admin import NewTopic as KNewTopic

    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        topic = "admin-kafka-python"
        a.create_topics([KNewTopic(topic, 1, 3)])
        p = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap)
        for i in range(6):
            p.send(topic, b"y%d" % i, partition=0)
        p.flush(30)
        p.close()
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            a.create_partitions({topic: KNewPartitions(1)})
        a.create_partitions({topic: KNewPartitions(3)})
        tp = kafka.TopicPartition(topic, 0)
        out = a.delete_records({tp: 2})
        assert out[tp]["low_watermark"] == 2
        desc = a.describe_cluster()
        assert desc["cluster_id"] == "raftsink-test"
        assert sorted(b["broker_id"] for b in desc["brokers"]) == sorted(cluster.nodes)
        # Each broker reports its own applied state: the followers must have applied the
        # DeleteRecords (and so everything before it) before their sizes can agree.
        cluster.wait_for(
            lambda: all(
                sn.fsm.log_start_offset(topic, 0) == 2 and sn.fsm.topic(topic).partitions == 3
                for sn in cluster.nodes.values()
            ),
            what="every node to apply the partitions and the deletion",
        )
        dirs = a.describe_log_dirs()
        sizes = _kafka_python_sizes(dirs, topic)
        assert sizes[0] > 0 and sizes[1] == 0 and sizes[2] == 0, sizes
        a.delete_topics([topic])
        cluster.wait_for(
            lambda: all(sn.fsm.topic(topic) is None for sn in cluster.nodes.values()),
            what="the topic gone on every node",
        )
    finally:
        a.close()


def _kafka_python_sizes(dirs: list[dict], topic: str) -> dict[int, int]:
    """partition -> size from kafka-python's describe_log_dirs answer: one
    {"broker", "log_dirs"} per broker; every broker holds every partition, so each
    must report the same sizes (they applied the same log)."""
    per_broker = []
    for broker in dirs:
        sizes = {}
        for result in broker["log_dirs"]:
            assert result["error_code"] == 0, result
            for t in result["topics"]:
                if t["name"] == topic:
                    for part in t["partitions"]:
                        sizes[part["partition_index"]] = part["partition_size"]
        per_broker.append(sizes)
    assert len(per_broker) == 3 and all(s == per_broker[0] for s in per_broker), per_broker
    return per_broker[0]


def test_deleting_a_topic_being_produced_to_is_safe(cluster):
    topic = "admin-busy"
    create(cluster, topic)
    stop = threading.Event()
    outcomes: list = []

    def produce_forever():
        p = ck.Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "linger.ms": 2,
                "enable.idempotence": True,
                "message.timeout.ms": 10_000,
            }
        )
        while not stop.is_set():
            with contextlib.suppress(BufferError):  # queue full: poll below drains it
                p.produce(topic, value=b"z" * 100, on_delivery=lambda e, m: outcomes.append(e))
            p.poll(0.001)
        p.flush(30)

    t = threading.Thread(target=produce_forever, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while sum(1 for e in outcomes if e is None) < 200:  # data is flowing
        assert time.monotonic() < deadline, "no produce acknowledged"
        time.sleep(0.05)
    a = admin(cluster)
    (fut,) = a.delete_topics([topic], operation_timeout=30).values()
    fut.result(timeout=30)
    # The producer goes on writing to the deleted topic until its deliveries fail
    # (UNKNOWN_TOPIC_OR_PARTITION, then the message timeout): wait for that.
    deadline = time.monotonic() + 60
    while not any(e is not None for e in outcomes):
        assert time.monotonic() < deadline, "no delivery failed after the delete"
        time.sleep(0.05)
    stop.set()
    t.join(60)
    assert not t.is_alive()
    assert all(
        sn.fsm.topic(topic) is None for sn in cluster.run(lambda: list(cluster.nodes.values()))
    )
    # The cluster is healthy: a leader, and a new topic works end to end.
    cluster.leader_id()
    create(cluster, "admin-after-busy")
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap})
    p.produce("admin-after-busy", value=b"ok")
    assert p.flush(30) == 0


def test_kafkajs_admin(cluster):
    import json

    from tests.helpers.client_tools import kafkajs_script

    node, script = kafkajs_script()
    topic = "admin-kafkajs"
    create(cluster, topic)
    times = produce_timed(cluster, topic, "gzip")
    queries = [0, 2500, 9001, 10_001]
    env = {**os.environ, "KAFKAJS_TIMES": json.dumps(queries), "KAFKAJS_DEADLINE_MS": "60000"}
    r = subprocess.run(
        [node, script, cluster.bootstrap, "admin", topic],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"], out
    assert out["shrink"] == "INVALID_PARTITIONS", out
    assert out["partitions"] == 3
    p0 = next(p for p in out["offsets"] if p["partition"] == 0)
    assert (p0["low"], p0["high"]) == ("2", str(len(times))), p0
    for ts in queries:
        # After DeleteRecords to 2; KafkaJS answers the high watermark where Kafka says -1.
        want = brute(times, ts, start=2)
        assert out["byTime"][str(ts)] == str(want if want >= 0 else len(times)), (ts, out)
    assert out["cluster"]["brokers"] == 3 and out["cluster"]["clusterId"] == "raftsink-test"
    # (KafkaJS's own listTopics right after may still see it on a follower that has not
    # applied the delete yet, as with Kafka's eventually consistent metadata.)
    cluster.wait_for(
        lambda: all(sn.fsm.topic(topic) is None for sn in cluster.nodes.values()),
        what="the topic gone on every node",
    )


def test_librdkafka_producer_survives_its_state_expiring(tmp_path):
    """An idempotent librdkafka producer idle past producers.id_expiration_ms goes on:
    its next batch (sequence 10, producer unknown) is accepted, offsets stay dense."""
    from dataclasses import replace

    from sink.lifecycle.producer_expiry import ProducerExpiryOptions

    class ExpiringCluster(SinkCluster):
        def config(self, i):
            return replace(super().config(i), producers=ProducerExpiryOptions(1000))

    c = ExpiringCluster(str(tmp_path), auto_create_topics=False, options=STEADY)
    c.start()
    try:
        c.leader_id()
        create(c, "expiring")
        p = ck.Producer(
            {"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        reports: list = []

        def send(n: int) -> None:
            for i in range(n):
                p.produce(
                    "expiring", value=b"e%d" % i, on_delivery=lambda e, m: reports.append((e, m))
                )
            assert p.flush(60) == 0

        send(10)
        c.wait_for(
            lambda: any(sn.fsm.producers.entries for sn in c.nodes.values()),
            what="producer state recorded",
        )
        c.wait_for(
            lambda: all(not sn.fsm.producers.entries for sn in c.nodes.values()),
            timeout=60,
            what="the idle producer's state expired on every node",
        )
        send(10)
        assert [e for e, _ in reports] == [None] * 20
        assert sorted(m.offset() for _, m in reports) == list(range(20))
        # Expired through the log by a leader's proposal (counted where it was proposed).
        assert c.run(lambda: sum(sn.producer_expiry.expired_total for sn in c.nodes.values())) >= 1
    finally:
        c.stop()


def test_kafka_python_describe_quorum_and_tiered_offsets(cluster):
    """kafka-python 3's describe_metadata_quorum (DescribeQuorum v2) from every node:
    the controller group's leader, its voters with their log ends, and each node's own
    listener addresses; latest-tiered offsets (ListOffsets v9) answer -1 (no tiering);
    list_config_resources names the topic and every broker."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient, OffsetSpec

    topic = "quorum-kp"
    create(cluster, topic)
    lead = cluster.leader_id()
    ports = {i: cluster.ports[i] for i in cluster.nodes}
    deadline = time.monotonic() + 30  # a follower learns the topic when it applies it
    while not all(topic_ready_at(port, topic, 1) for port in ports.values()):
        assert time.monotonic() < deadline, f"{topic} not known to every node"
        time.sleep(0.05)
    for node, port in ports.items():
        a = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
        try:
            q = a.describe_metadata_quorum()
            (part,) = q["topics"][0]["partitions"]
            assert q["topics"][0]["topic_name"] == "__cluster_metadata"
            assert part["error"] is None, (node, part)
            assert part["leader_id"] == lead and part["high_watermark"] > 0
            voters = {v["replica_id"]: v["log_end_offset"] for v in part["current_voters"]}
            assert sorted(voters) == sorted(cluster.nodes)
            assert voters[lead] >= part["high_watermark"]
            assert all(0 <= end <= voters[lead] for end in voters.values()), voters
            assert {n["node_id"]: n["listeners"][0]["port"] for n in q["nodes"]} == ports
            listed = a.list_config_resources(["TOPIC", "BROKER"])  # ListConfigResources v1
            assert topic in listed["topic"] and sorted(listed["broker"]) == sorted(
                str(n) for n in ports
            ), listed
            tp = kafka.TopicPartition(topic, 0)
            tiered = a.list_partition_offsets({tp: OffsetSpec.LATEST_TIERED})
            assert tiered[tp].offset == -1, (node, tiered)
        finally:
            a.close()
