"""The Spark source (format "raftsink", connectors/spark) reads a topic from the
containerized 3-node cluster exactly once: Spark runs on the host (local[2]) and reaches
the nodes' read APIs through their published 127.0.0.1 ports.

A batch read returns every acknowledged record once; a streaming query to Parquet with a
checkpoint runs twice (availableNow), the Raft leader container killed with SIGKILL between
the runs while more records are produced; the table holds every acknowledged record
exactly once.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.containers.kafka_util import AckingProducer
from tests.helpers.spark_workers import MAX_WORKER_TIMEOUTS, SPARK_WORKER_TIMEOUT

TOPIC = "spark-in"
PARTITIONS = 3


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers import connectors.spark
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from connectors.spark import register

    t0 = time.monotonic()
    session = (
        SparkSession.builder.master("local[2,4]")  # 4 attempts per task
        .appName("raftsink-container-test")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    print(f"Spark session in {time.monotonic() - t0:.1f} s")
    yield session
    session.stop()


def _values(rows) -> list[bytes]:
    return [bytes(r["value"]) for r in rows]


def test_spark_source_reads_container_cluster_exactly_once(container_cluster, spark, tmp_path):
    cluster = container_cluster
    prod = AckingProducer(cluster.bootstrap_servers, TOPIC, PARTITIONS)
    prod.send(2_000)
    prod.flush(60)
    assert not prod.failed and prod.total_acked() == prod.sent
    nodes = cluster.read_api_nodes
    print(f"raftsink.nodes={nodes}")

    # Batch read.
    t0 = time.monotonic()
    rows = (
        spark.read.format("raftsink")
        .option("raftsink.nodes", nodes)
        .option("subscribe", TOPIC)
        .load()
        .select("partition", "offset", "value")
        .collect()
    )
    print(f"batch read of {len(rows)} rows in {time.monotonic() - t0:.1f} s")
    acked = {v for records in prod.acked.values() for _, v in records}
    values = _values(rows)
    assert len(values) == len(set(values)) == len(acked)
    assert set(values) == acked
    for p, records in prod.acked.items():
        got = sorted((r["offset"], bytes(r["value"])) for r in rows if r["partition"] == p)
        assert got == sorted(records), f"partition {p}"

    # Streaming to Parquet with a checkpoint, twice; the leader is killed in between.
    out, ckpt = str(tmp_path / "table"), str(tmp_path / "checkpoint")

    def drain() -> None:
        from pyspark.errors import StreamingQueryException

        for attempt in range(MAX_WORKER_TIMEOUTS + 1):
            q = (
                spark.readStream.format("raftsink")
                .option("raftsink.nodes", nodes)
                .option("subscribe", TOPIC)
                .option("startingOffsets", "earliest")
                .load()
                .writeStream.format("parquet")
                .option("path", out)
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            try:
                q.awaitTermination(120)
            except StreamingQueryException as exc:
                # A query restarted from its checkpoint: the crash the test is about.
                if SPARK_WORKER_TIMEOUT in str(exc) and attempt < MAX_WORKER_TIMEOUTS:
                    print(
                        f"query failed on Spark's worker connect-back timeout: restart {attempt + 1}"
                    )
                    continue
                raise
            assert not q.isActive, "the availableNow query did not finish in 120 s"
            assert q.exception() is None, q.exception()
            return

    t0 = time.monotonic()
    drain()
    print(f"first availableNow run in {time.monotonic() - t0:.1f} s")
    leader = cluster.wait_leader()
    cluster.kill(leader)
    print(f"docker kill -s KILL node {leader}")
    prod.send(1_000)
    prod.flush(120)
    assert not prod.failed and prod.total_acked() == prod.sent
    survivors = [i for i in cluster.nodes if i != leader]
    cluster.wait_leader(nodes=survivors, exclude=leader)
    t0 = time.monotonic()
    drain()  # the killed node's read API is still in raftsink.nodes
    print(f"second availableNow run (one node down) in {time.monotonic() - t0:.1f} s")

    table = _values(spark.read.parquet(out).select("value").collect())
    acked = {v for records in prod.acked.values() for _, v in records}
    dups = len(table) - len(set(table))
    missing = acked - set(table)
    print(f"parquet rows {len(table)}, acknowledged {len(acked)}, duplicates {dups}")
    assert dups == 0 and not missing and set(table) == acked, (dups, len(missing))
