"""Real Kafka clients over TCP against a real 3-node in-process raftsink cluster.

One cluster per module (start-up is the slow part); every test uses its own
topic. Each produced record is read back with the client's own consumer and
checked: key, value, headers, offset (dense from 0).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time

import pytest

from tests.helpers.sink_cluster import STEADY, SinkCluster

ck = pytest.importorskip("confluent_kafka")

N = 300


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # STEADY: these tests are about the clients, not failover; FAST's 100 ms election
    # timeout lets a loaded machine's stalls depose the leader, or keep it from being
    # sure it still leads (ListOffsets NOT_LEADER for 30 s: aiokafka, under load).
    c = SinkCluster(str(tmp_path_factory.mktemp("sink")), options=STEADY)
    c.start()
    c.leader_id()
    yield c
    c.stop()


def _expected(prefix: str, n: int = N) -> list[tuple[bytes, bytes, list]]:
    return [
        (f"k{i}".encode(), f"{prefix}-v{i}".encode() * 3, [("h", f"{i}".encode())])
        for i in range(n)
    ]


def confluent_produce(bootstrap: str, topic: str, records, **conf) -> list:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    reports: list = []
    for key, value, headers in records:
        p.produce(
            topic,
            key=key,
            value=value,
            headers=headers,
            on_delivery=lambda e, m: reports.append((e, m.offset())),
        )
        p.poll(0)
    assert p.flush(60) == 0
    return reports


def confluent_consume(
    bootstrap: str, topic: str, n: int, partition: int = 0, timeout: float = 30.0
) -> list:
    c = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False}
    )
    c.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
    out: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value(), m.headers() or []))
    finally:
        c.close()
    return out


def check_records(got: list, expected: list) -> None:
    assert len(got) == len(expected), (len(got), len(expected))
    for i, ((off, key, value, headers), (ek, ev, eh)) in enumerate(zip(got, expected, strict=True)):
        assert off == i
        assert (key, value, list(headers)) == (ek, ev, eh), i


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("idempotence", [True, False])
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_codecs(cluster, codec, idempotence):
    topic = f"ck-{codec}-{int(idempotence)}"
    recs = _expected(topic)
    reports = confluent_produce(
        cluster.bootstrap,
        topic,
        recs,
        **{"compression.type": codec, "enable.idempotence": idempotence, "acks": "all"},
    )
    assert [e for e, _ in reports] == [None] * N
    assert sorted(o for _, o in reports) == list(range(N))
    check_records(confluent_consume(cluster.bootstrap, topic, N), recs)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_acks(cluster, acks):
    topic = f"ck-acks-{acks}"
    recs = _expected(topic)
    reports = confluent_produce(cluster.bootstrap, topic, recs, acks=acks)
    assert all(e is None for e, _ in reports)
    if acks != "0":
        assert sorted(o for _, o in reports) == list(range(N))
    else:  # no response at all: librdkafka cannot know offsets
        assert all(o is None or o < 0 for _, o in reports)
    check_records(confluent_consume(cluster.bootstrap, topic, N), recs)


def test_metadata_lists_all_brokers_and_leader(cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = admin.create_topics([NewTopic("ck-meta", num_partitions=3, replication_factor=3)])
    fs["ck-meta"].result(20)
    md = admin.list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    assert {(b.host, b.port) for b in md.brokers.values()} == {
        ("127.0.0.1", cluster.ports[i]) for i in (1, 2, 3)
    }
    lead = cluster.leader_id()
    parts = md.topics["ck-meta"].partitions
    assert sorted(parts) == [0, 1, 2] and all(p.leader == lead for p in parts.values())
    # keyed records over 3 partitions, each partition dense from 0
    p = ck.Producer(
        {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    delivered: list = []
    for i in range(90):
        p.produce(
            "ck-meta",
            key=f"k{i}".encode(),
            value=b"x",
            on_delivery=lambda e, m: delivered.append((e, m.partition(), m.offset())),
        )
    assert p.flush(30) == 0
    by_part: dict[int, list[int]] = {}
    for e, part, off in delivered:
        assert e is None
        by_part.setdefault(part, []).append(off)
    for offs in by_part.values():
        assert sorted(offs) == list(range(len(offs)))
    total = sum(
        len(confluent_consume(cluster.bootstrap, "ck-meta", len(offs), partition=part))
        for part, offs in by_part.items()
    )
    assert total == 90


def test_produce_to_follower_is_redirected(cluster):
    """Bootstrap only at a follower: NOT_LEADER_OR_FOLLOWER + metadata lead the client on."""
    lead = cluster.leader_id()
    follower = next(i for i in cluster.nodes if i != lead)
    boot = f"127.0.0.1:{cluster.ports[follower]}"
    topic = "ck-follower"
    recs = _expected(topic, 50)
    reports = confluent_produce(boot, topic, recs, **{"enable.idempotence": True, "acks": "all"})
    assert sorted(o for _, o in reports) == list(range(50))
    check_records(confluent_consume(boot, topic, 50), recs)


def test_kafka_python_producer_and_consumer(cluster):
    kafka = pytest.importorskip("kafka")
    topic = "kp-topic"
    recs = _expected(topic)
    prod = kafka.KafkaProducer(
        bootstrap_servers=cluster.bootstrap, enable_idempotence=True, acks="all", linger_ms=5
    )
    futs = [prod.send(topic, key=k, value=v, headers=h) for k, v, h in recs]
    prod.flush(30)
    offsets = [f.get(30).offset for f in futs]
    prod.close()
    assert offsets == list(range(N))
    cons = kafka.KafkaConsumer(
        bootstrap_servers=cluster.bootstrap, enable_auto_commit=False, consumer_timeout_ms=15000
    )
    tp = kafka.TopicPartition(topic, 0)
    cons.assign([tp])
    cons.seek_to_beginning(tp)
    got = []
    for m in cons:
        got.append((m.offset, m.key, m.value, list(m.headers)))
        if len(got) == N:
            break
    cons.close()
    check_records(got, recs)


def test_aiokafka_producer_and_consumer(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic = "aio-topic"
    recs = _expected(topic)

    async def main():
        prod = aiokafka.AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap, enable_idempotence=True, compression_type="gzip"
        )
        await prod.start()
        try:
            metas = await asyncio.gather(
                *[await prod.send(topic, key=k, value=v, headers=h) for k, v, h in recs]
            )
        finally:
            await prod.stop()
        cons = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap, enable_auto_commit=False
        )
        await cons.start()
        got = []
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            cons.assign([tp])
            await cons.seek_to_beginning(tp)
            async with asyncio.timeout(30):
                while len(got) < N:
                    batch = await cons.getmany(tp, timeout_ms=500)
                    for m in batch.get(tp, []):
                        got.append((m.offset, m.key, m.value, list(m.headers)))
        finally:
            await cons.stop()
        return [m.offset for m in metas], got

    offsets, got = asyncio.run(main())
    assert offsets == list(range(N))
    check_records(got, recs)


def _kcat() -> str:
    path = shutil.which("kcat")
    if path is None and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "kcat"], capture_output=True, timeout=300)
        path = shutil.which("kcat")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("kcat is required in CI (apt-get install -y kcat)")
        pytest.skip("kcat not installed")
    return path


def test_kcat_produce_and_consume(cluster):
    kcat = _kcat()
    topic = "kcat-topic"
    lines = [f"kcat-line-{i}" for i in range(N)]
    r = subprocess.run(
        [kcat, "-b", cluster.bootstrap, "-P", "-t", topic, "-z", "lz4", "-X", "acks=all"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [
            kcat,
            "-b",
            cluster.bootstrap,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o %s\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    got = r.stdout.splitlines()
    assert got == [f"{i} {line}" for i, line in enumerate(lines)]
    r = subprocess.run(
        [kcat, "-b", cluster.bootstrap, "-L"], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0 and "3 brokers" in r.stdout, r.stdout + r.stderr


def test_failover_idempotent_no_duplicates(tmp_path):
    """Leader stopped mid-stream: a new leader takes over; the idempotent producer
    keeps going; every record is present exactly once with dense offsets."""
    c = SinkCluster(str(tmp_path))
    c.start()
    try:
        old = c.leader_id()
        topic = "failover"
        p = ck.Producer(
            {
                "bootstrap.servers": c.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "batch.num.messages": 20,
                "message.timeout.ms": 60000,
            }
        )
        reports: list = []
        n = 2000
        for i in range(n):
            p.produce(
                topic,
                key=str(i).encode(),
                value=f"v{i}".encode(),
                on_delivery=lambda e, m: reports.append((e, m.offset())),
            )
            p.poll(0)
            if i == n // 2:  # records are in flight (unflushed) when the leader goes
                c.call(c.stop_node(old))
            if i % 100 == 0:
                time.sleep(0.01)  # spread the stream over time (not a synchronisation)
        assert p.flush(60) == 0
        assert all(e is None for e, _ in reports), [e for e, _ in reports if e][:3]
        new = c.leader_id(exclude=old)
        assert new != old
        got = confluent_consume(c.bootstrap, topic, n, timeout=40)
        assert [o for o, *_ in got] == list(range(n))
        assert [k for _, k, *_ in got] == [str(i).encode() for i in range(n)]
    finally:
        c.stop()
