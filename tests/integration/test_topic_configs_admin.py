"""Topic configs end to end: real node processes, confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient: create with configs (and the refusals), describe,
alter and incremental alter; max.message.bytes enforced at produce; LogAppendTime
stamped by the leader."""

from __future__ import annotations

import time

import pytest

from sink.process_cluster import SinkProcessCluster

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

kafka_admin = pytest.importorskip("kafka.admin")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with SinkProcessCluster(str(tmp_path_factory.mktemp("topic-configs"))) as c:
        yield c


_RETRIABLE = (KafkaError.NOT_CONTROLLER, KafkaError.REQUEST_TIMED_OUT)


def _create(admin: AdminClient, topics: list[NewTopic], **kw) -> dict:
    """name -> None or the KafkaError; a leader change (NOT_CONTROLLER, timeout: the
    machine is loaded) is retried, as the Java AdminClient does, until a deadline."""
    out: dict = {}
    deadline = time.monotonic() + 60
    todo = list(topics)
    retried: set[str] = set()
    while todo:
        again = []
        for t in todo:
            try:
                admin.create_topics([t], **kw)[t.topic].result(30)
                out[t.topic] = None
            except ck.KafkaException as exc:
                err = exc.args[0]
                if err.code() in _RETRIABLE and time.monotonic() < deadline:
                    again.append(t)
                    retried.add(t.topic)
                elif err.code() == KafkaError.TOPIC_ALREADY_EXISTS and t.topic in retried:
                    out[t.topic] = None  # a retry of a create that did commit
                else:
                    out[t.topic] = err
        todo = again
        if todo:
            time.sleep(0.5)
    return out


def test_confluent_admin_create_describe_alter(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    res = _create(
        admin,
        [
            NewTopic("c-ok", 2, config={"retention.ms": "60000", "retention.bytes": "100000"}),
            NewTopic("c-compact", 1, config={"cleanup.policy": "compact"}),
            NewTopic("c-unknown", 1, config={"no.such.config": "1"}),
            NewTopic("c-range", 1, config={"retention.ms": "-5"}),
        ],
    )
    assert res["c-ok"] is None
    for name, match in [
        ("c-compact", "compact is not supported"),
        ("c-unknown", "Unknown topic config name"),
        ("c-range", "out of range"),
    ]:
        assert res[name].code() == KafkaError.INVALID_CONFIG and match in res[name].str()
    # validate_only: checked, nothing created.
    res = _create(admin, [NewTopic("c-dry", 1, config={"retention.ms": "5"})], validate_only=True)
    assert res["c-dry"] is None
    assert "c-dry" not in admin.list_topics(timeout=10).topics

    r = ConfigResource("topic", "c-ok")
    d = admin.describe_configs([r])[r].result(30)
    assert d["retention.ms"].value == "60000"
    assert d["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert d["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    syn = [(s.name, s.value) for s in d["retention.ms"].synonyms.values()]
    assert ("log.retention.ms", str(7 * 24 * 3600 * 1000)) in syn

    inc = ConfigResource(
        "topic",
        "c-ok",
        incremental_configs=[
            ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([inc])[inc].result(30)
    d = admin.describe_configs([r])[r].result(30)
    assert d["retention.ms"].value == "120000" and d["retention.bytes"].value == "-1"
    bad = ConfigResource(
        "topic",
        "c-ok",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(ck.KafkaException) as exc:
        admin.incremental_alter_configs([bad])[bad].result(30)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG
    missing = ConfigResource("topic", "no-such-topic", set_config={"retention.ms": "1"})
    with pytest.raises(ck.KafkaException) as exc:
        admin.alter_configs([missing])[missing].result(30)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # Legacy AlterConfigs replaces the whole set.
    full = ConfigResource("topic", "c-ok", set_config={"max.message.bytes": "5000"})
    admin.alter_configs([full])[full].result(30)
    d = admin.describe_configs([r])[r].result(30)
    assert d["max.message.bytes"].value == "5000" and d["retention.ms"].value == str(
        7 * 24 * 3600 * 1000
    )
    b = ConfigResource("broker", "1")
    d = admin.describe_configs([b])[b].result(30)
    assert d["log.retention.ms"].value == str(7 * 24 * 3600 * 1000)


def _eventually(read, ok, timeout: float = 30.0) -> str:
    """read() until ok(result) or the deadline; returns the last result (the caller asserts)."""
    deadline = time.monotonic() + timeout
    while True:
        got = read()
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_kafka_python_admin_create_describe_alter(cluster):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([KNewTopic("kp-ok", 1, 3, topic_configs={"retention.ms": "90000"})])
        with pytest.raises(Exception, match=r"(?i)invalid.?config"):
            admin.create_topics(
                [KNewTopic("kp-bad", 1, 3, topic_configs={"cleanup.policy": "compact"})]
            )
        # kafka-python asks any broker; a follower answers from what it has applied (as a
        # Kafka broker answers from its metadata cache): poll until it has the creation.
        flat = _eventually(
            lambda: str(
                admin.describe_configs(
                    [KConfigResource(ConfigResourceType.TOPIC, "kp-ok")], config_filter="all"
                )
            ),
            lambda text: "retention.ms" in text and "90000" in text,
        )
        assert "retention.ms" in flat and "90000" in flat
        modified = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-ok")])
        assert "90000" in str(modified) and "max.message.bytes" not in str(modified)
        res = admin.alter_configs(
            [
                KConfigResource(
                    ConfigResourceType.TOPIC, "kp-ok", configs={"retention.bytes": "4096"}
                )
            ]
        )
        assert "OK" in str(res), res
        after = _eventually(
            lambda: str(
                admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-ok")])
            ),
            lambda text: "4096" in text,
        )
        assert "4096" in after and "90000" in after  # incremental: retention.ms kept
    finally:
        admin.close()


def test_max_message_bytes_and_log_append_time(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    res = _create(
        admin,
        [
            NewTopic("small", 1, config={"max.message.bytes": "2000"}),
            NewTopic("lat", 1, config={"message.timestamp.type": "LogAppendTime"}),
        ],
    )
    assert res == {"small": None, "lat": None}
    results: dict[bytes, object] = {}

    def report(err, m) -> None:
        results[m.value()[:1]] = err

    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    p.produce("small", b"x" * 5000, on_delivery=report)  # one batch above 2000 bytes
    assert p.flush(30) == 0
    p.produce("small", b"y" * 100, on_delivery=report)
    p.produce("lat", b"z", timestamp=1000, on_delivery=report)
    assert p.flush(30) == 0
    assert results[b"x"] is not None and results[b"x"].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert results[b"y"] is None and results[b"z"] is None
    before = int(time.time() * 1000)
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused"})
    c.assign([TopicPartition("lat", 0, 0)])
    deadline = time.monotonic() + 30
    msg = None
    while time.monotonic() < deadline:
        msg = c.poll(1)
        if msg is not None and msg.error() is None:
            break
    c.close()
    assert msg is not None and msg.error() is None
    ts_type, ts = msg.timestamp()
    assert ts_type == ck.TIMESTAMP_LOG_APPEND_TIME
    assert abs(ts - before) < 120_000  # the leader's clock, not the producer's 1000
