"""The Spark source's timestamp options against a real 3-node SinkProcessCluster (real
processes, real gRPC read API): startingOffsetsByTimestamp / endingTimestamp in a batch
query, startingTimestamp in a streaming query (availableNow), the "No offset matched"
error and startingOffsetsByTimestampStrategy=latest. Kept short: Spark is slow."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.integration.test_spark_source import new_session, producer, read_api_nodes

pytestmark = [pytest.mark.slow]
ck = pytest.importorskip("confluent_kafka")

TOPIC = "spark-times"
# Per partition, record timestamps in offset order (not monotonic).
TIMES = {0: [1000, 3000, 2000, 5000, 4000], 1: [500, 6000, 5500, 7000]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from sink.process_cluster import SinkProcessCluster

    c = SinkProcessCluster(str(tmp_path_factory.mktemp("spark-times")), 3, default_partitions=2)
    c.start()
    try:
        asyncio.run(c.wait_ready(timeout=60))
        # 1970 timestamps: the default retention.ms (7 days) would expire them at a
        # retention check, as Kafka would; time retention is off on this topic.
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        topic = NewTopic(TOPIC, 2, config={"retention.ms": "-1"})
        admin.create_topics([topic], operation_timeout=30)[TOPIC].result(timeout=30)
        p = producer(c, **{"compression.type": "lz4", "linger.ms": 100})
        for part, times in TIMES.items():
            for ts in times:
                p.produce(TOPIC, value=b"%d" % ts, partition=part, timestamp=ts)
        assert p.flush(60) == 0
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def spark():
    s = new_session("raftsink-timestamps")
    yield s
    s.stop()


def first_at_or_after(part: int, ts: int) -> int:
    for off, t in enumerate(TIMES[part]):
        if t >= ts:
            return off
    return len(TIMES[part])


def offsets(df) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {0: [], 1: []}
    for r in df.select("partition", "offset").collect():
        out[r.partition].append(r.offset)
    return {p: sorted(v) for p, v in out.items()}


def test_batch_by_timestamp(cluster, spark):
    df = (
        spark.read.format("raftsink")
        .option("raftsink.nodes", read_api_nodes(cluster))
        .option("subscribe", TOPIC)
        .option("startingOffsetsByTimestamp", json.dumps({TOPIC: {"0": 2500, "1": 5800}}))
        .option("endingTimestamp", "5000")
        .load()
    )
    got = offsets(df)
    # partition 0: from offset 1 (3000) to before the first record >= 5000 (offset 3).
    assert got[0] == list(range(first_at_or_after(0, 2500), first_at_or_after(0, 5000)))
    # partition 1: start 1 (6000); the end (first >= 5000) is also 1: nothing.
    assert got[1] == []


def test_no_offset_matched_and_latest_strategy(cluster, spark):
    def read(**opts):
        r = spark.read.format("raftsink").option("raftsink.nodes", read_api_nodes(cluster))
        r = r.option("subscribe", TOPIC).option("startingTimestamp", "6500")
        for k, v in opts.items():
            r = r.option(k, v)
        return offsets(r.load())

    with pytest.raises(Exception, match="No offset matched"):
        read()  # partition 0 has nothing at or after 6500
    got = read(startingOffsetsByTimestampStrategy="latest")
    assert got == {0: [], 1: [3]}


def test_streaming_starting_timestamp(cluster, spark, tmp_path):
    df = (
        spark.readStream.format("raftsink")
        .option("raftsink.nodes", read_api_nodes(cluster))
        .option("subscribe", TOPIC)
        .option("startingTimestamp", "4500")
        .load()
    )
    q = (
        df.select("partition", "offset")
        .writeStream.format("memory")
        .queryName("times_stream")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    got = offsets(spark.table("times_stream"))
    assert got == {
        0: list(range(first_at_or_after(0, 4500), len(TIMES[0]))),
        1: list(range(first_at_or_after(1, 4500), len(TIMES[1]))),
    }
