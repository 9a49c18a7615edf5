"""Retention guard through Spark: a streaming query with a pipelineId registers
with the cluster; compaction keeps what it has not consumed; when the hard
limit removes it anyway, the query fails (failOnDataLoss=true) or skips ahead
(failOnDataLoss=false)."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Producer

from sink.process_cluster import SinkProcessCluster
from sink.readapi import ReadApiClient

TOPIC = "guard"


def produce_entries(bootstrap: str, start: int, n: int) -> None:
    """n records, each flushed alone so each is its own Raft entry."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "log_level": 2})
    for i in range(start, start + n):
        p.produce(TOPIC, value=b"g%d" % i)
        assert p.flush(30) == 0


def log_start(read_api: str) -> tuple[int, int]:
    async def q() -> tuple[int, int]:
        c = ReadApiClient(read_api)
        try:
            part = (await c.partitions([TOPIC], linearizable=True)).partitions[0]
            return part.log_start_offset, part.high_watermark
        finally:
            await c.close()

    return asyncio.run(q())


@pytest.fixture(scope="module")
def spark():
    from connectors.spark import local_session

    s = local_session("retention-guard")
    yield s
    s.stop()


def run_once(spark, nodes: str, ckpt: str, out: str, fail_on_data_loss: bool) -> None:
    q = (
        spark.readStream.format("raftsink")
        .option("raftsink.nodes", nodes)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("pipelineId", "guard-pipeline")
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination()
    except Exception as exc:  # StreamingQueryException: carry its message up
        raise RuntimeError(str(exc)) from None


def test_uncommitted_data_survives_and_loss_is_reported(tmp_path, spark):
    cluster = SinkProcessCluster(
        str(tmp_path / "cluster"),
        extra_args=[
            "--snapshot-every-entries", "25",
            "--retention-max-entries", "20",
            "--retention-hard-max-entries", "300",
        ],
    )  # fmt: skip
    cluster.start()
    try:
        leader = asyncio.run(cluster.wait_ready())
        read_api = cluster.peers[leader].read_api
        nodes = ",".join(p.read_api for p in cluster.peers.values())
        ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
        produce_entries(cluster.bootstrap_servers, 0, 1)
        # The first run resolves its start (offset 0) and reports it at once:
        # the pipeline is registered before any compaction could pass it.
        run_once(spark, nodes, ckpt, out, fail_on_data_loss=True)
        produce_entries(cluster.bootstrap_servers, 1, 200)
        # Compaction is on (soft limit 20 entries) but stops below what the
        # pipeline has committed: nothing it has not consumed is gone.
        start, hw = log_start(read_api)
        assert hw == 201
        assert start <= 1, f"retention removed unconsumed records (log start {start})"
        # The pipeline consumes everything; its next commit releases the data.
        run_once(spark, nodes, ckpt, out, fail_on_data_loss=True)
        assert spark.read.parquet(out).count() == 201

        # Now the pipeline stalls while the hard limit (300 entries) is exceeded.
        produce_entries(cluster.bootstrap_servers, 201, 450)
        deadline = time.monotonic() + 60
        while log_start(read_api)[0] <= 201:
            assert time.monotonic() < deadline, "hard retention limit never compacted"
            time.sleep(0.2)
        with pytest.raises(RuntimeError, match=r"(?i)data loss|DataLoss"):
            run_once(spark, nodes, ckpt, out, fail_on_data_loss=True)
        # Accepting the loss: the query skips to the log start and goes on.
        run_once(spark, nodes, ckpt, out, fail_on_data_loss=False)
        rows = spark.read.parquet(out).select("offset").collect()
        offsets = sorted(r["offset"] for r in rows)
        assert offsets[:201] == list(range(201))
        assert offsets[-1] == 650 and len(offsets) == len(set(offsets))
    finally:
        cluster.stop()
