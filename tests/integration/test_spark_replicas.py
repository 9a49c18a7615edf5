"""The Spark source reads each partition on a replica of it, and survives that replica's
death during the batch (issue 16: reads per replica).

A 3-node SinkProcessCluster; an idempotent producer (acks=all) writes two partitions; once
every node has applied everything:
1. the batch reader plans each range on a follower first, the partition's leader last
   (the read API's Partitions fields 5-7);
2. the range's chosen replica is killed -9 in the middle of its read (after the reader
   has returned its first rows from it): the reader goes on at the next replica, and the
   batch holds every acknowledged record exactly once, at its offset;
3. with that replica still down, Spark itself reads the topic: its plan still names the
   dead replica first for some ranges (the live nodes list it), and the read fails over.

No timing luck: the kill happens between two chunks the test pulls from the reader's
generator itself, so it always lands mid-range.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

import pytest

from connectors.spark import fetch
from connectors.spark.batch import RaftsinkBatchReader
from connectors.spark.options import parse_options
from sink.process_cluster import SinkProcessCluster

pytestmark = [pytest.mark.slow, pytest.mark.crash]
ck = pytest.importorskip("confluent_kafka")
pytest.importorskip("pyspark")

TOPIC = "replica-kill"
PARTITIONS = 2
PER_PARTITION = 2_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SinkProcessCluster(
        str(tmp_path_factory.mktemp("spark-replicas")), 3, default_partitions=PARTITIONS
    )
    c.start()
    try:
        asyncio.run(c.wait_ready(timeout=60))
        yield c
    finally:
        c.stop()


def _produce(c: SinkProcessCluster, rng: random.Random) -> dict[tuple[int, int], bytes]:
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[str] = []
    p = ck.Producer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Small batches: a Fetch of fetchMaxBytes returns a few, so the read of a
            # range takes many Fetches and the kill can land between two of them.
            "batch.num.messages": 20,
            "message.timeout.ms": 60_000,
        }
    )

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[(msg.partition(), msg.offset())] = msg.value()

    for i in range(PARTITIONS * PER_PARTITION):
        value = f"v{i}-".encode() + rng.randbytes(rng.randint(0, 200))
        while True:
            try:
                p.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(120) == 0
    assert not failed, failed[:3]
    return acked


def _partition_leaders(c: SinkProcessCluster) -> dict[int, int]:
    """partition -> its leader by Metadata, once every partition has one (deadline 60 s)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    deadline = time.monotonic() + 60
    while True:
        md = admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions
        leaders = {p: m.leader for p, m in md.items()}
        if len(leaders) == PARTITIONS and all(n > 0 for n in leaders.values()):
            return leaders
        assert time.monotonic() < deadline, f"partitions without a leader: {leaders}"
        time.sleep(0.2)


def _check(rows, acked) -> None:
    got: dict[tuple[int, int], bytes] = {}
    for partition, offset, value in rows:
        assert (partition, offset) not in got, f"{partition}/{offset} read twice"
        got[(partition, offset)] = value
    assert got.keys() == acked.keys(), (
        f"read {len(got)} records, acknowledged {len(acked)}; "
        f"missing {sorted(acked.keys() - got.keys())[:5]}, extra {sorted(got.keys() - acked.keys())[:5]}"
    )
    assert got == acked


def test_reads_on_replicas_and_survives_the_chosen_one_killed_mid_range(cluster, monkeypatch):
    seed = int(os.environ.get("RAFTSINK_SPARK_SEED", random.randrange(1 << 30)))
    print(f"seed={seed} (RAFTSINK_SPARK_SEED repeats it)")
    acked = _produce(cluster, random.Random(seed))
    asyncio.run(cluster.wait_settled(120))  # every replica can serve every offset
    asyncio.run(cluster.wait_ready(60))
    # Each partition's leader as clients see it (Kafka Metadata): the Raft leader with one
    # group, each partition's own data group's leader with partition groups.
    leaders = _partition_leaders(cluster)
    by_address = {p.read_api: i for i, p in cluster.peers.items()}
    nodes = ",".join(p.read_api for p in cluster.peers.values())

    # 1. The plan: every range on a follower first, its leader last.
    opts = parse_options(
        {"raftsink.nodes": nodes, "subscribe": TOPIC, "fetchMaxBytes": "4096"}, streaming=False
    )
    reader = RaftsinkBatchReader(opts)
    ranges = list(reader.partitions())
    assert [(r.partition, r.start, r.end) for r in ranges] == [
        (q, 0, PER_PARTITION) for q in range(PARTITIONS)
    ]
    for r in ranges:
        assert [by_address[a] for a in r.replicas][-1] == leaders[r.partition], r.replicas
        assert sorted(by_address[a] for a in r.replicas) == sorted(cluster.peers)
    # The two partitions start on different followers.
    assert len({r.replicas[0] for r in ranges}) == 2

    # 2. Kill the first range's chosen replica after it served the first rows.
    victim = by_address[ranges[0].replicas[0]]
    assert victim != leaders[0]
    monkeypatch.setattr(fetch, "CHUNK_ROWS", 100)  # yield every ~100 rows
    rows = []
    gen = reader.read(ranges[0])
    first = next(gen)
    assert 0 < first.num_rows < PER_PARTITION
    cluster.kill(victim)
    print(f"killed node {victim} (the chosen replica of {TOPIC}/0) after {first.num_rows} rows")
    for rb in [first, *gen, *(b for r in ranges[1:] for b in reader.read(r))]:
        d = rb.to_pydict()
        rows += zip(d["partition"], d["offset"], d["value"], strict=True)
    _check(rows, acked)
    monkeypatch.undo()

    # 3. Spark, with the victim still down.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from connectors.spark import register

    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("raftsink-replicas")
        .config("spark.python.authenticate.socketTimeout", "60s")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        got = (
            spark.read.format("raftsink")
            .option("raftsink.nodes", nodes)
            .option("subscribe", TOPIC)
            .option("minPartitions", "6")  # ranges on both followers, one of them dead
            .load()
            .select("partition", "offset", "value")
            .collect()
        )
        _check([(r.partition, r.offset, bytes(r.value)) for r in got], acked)
    finally:
        spark.stop()
    cluster.start(victim)
    asyncio.run(cluster.wait_ready(60))
