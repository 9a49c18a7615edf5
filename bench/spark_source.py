"""Benchmark: the raftsink Spark source into Parquet, against an in-memory Arrow ceiling.

A 3-node SinkProcessCluster; confluent-kafka writes N records of 100 B to a topic with 2
partitions; then in ONE SparkSession (local[2]):
  - throughput: availableNow queries into Parquet, alternating the raftsink source and an
    in-memory Arrow source (same schema, same rows per input partition: the ceiling of the
    Python data source path on this machine); rows/s = rows / sum(triggerExecution);
  - freshness: a 1-second-trigger query writes each micro-batch to Parquet (foreachBatch)
    while a producer writes at a steady rate; freshness of a record = time its batch's write
    finished - its Kafka CreateTime. p50 / p99 over the records.
The last line of output is one JSON object. `--quick` is a smaller run (Spark start-up alone
is 10-20 s, so even --quick takes about a minute or two).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from connectors.spark.schema import arrow_schema, spark_schema

VALUE = b"v" * 100
TOPIC = "bench"


# ------------------------------------------------------------------ the in-memory ceiling
# Defined in __main__, so Spark ships these classes by value to its Python processes.


class MemPartition(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        self.index, self.rows = index, rows


class MemReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets {"rows": n}; read() yields prebuilt Arrow batches of the source's schema."""

    def __init__(self, options) -> None:
        self.total = int(options["rows"])
        self.per_part = int(options["perpartition"])

    def initialOffset(self) -> dict:
        return {"rows": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start, limit) -> dict:
        return {"rows": self.total}

    def partitions(self, start, end):
        s, e = start["rows"], end["rows"]
        return [
            MemPartition(i, min(self.per_part, e - lo))
            for i, lo in enumerate(range(s, e, self.per_part))
        ]

    def read(self, partition):
        # The cheapest possible read(): one prebuilt batch (same shape as the topic's records:
        # unique keys, 100 B values), re-yielded with shifted offsets. Arrow work only.
        import pyarrow.compute as pc

        n, chunk = partition.rows, 32_768  # the same chunking as the raftsink reader
        schema = arrow_schema(True)
        m0 = min(chunk, n)
        proto = pa.RecordBatch.from_arrays(
            [
                pa.array([b"k%d" % i for i in range(m0)], pa.binary()),
                pa.array([VALUE] * m0, pa.binary()),
                pa.array([TOPIC] * m0, pa.string()),
                pa.array([partition.index % 2] * m0, pa.int32()),
                pa.array(range(m0), pa.int64()),
                pa.array([1_700_000_000_000_000] * m0, pa.timestamp("us", tz="UTC")),
                pa.array([0] * m0, pa.int32()),
                pa.nulls(m0, schema.field("headers").type),
            ],
            schema=schema,
        )
        for lo in range(0, n, chunk):
            b = proto.slice(0, min(chunk, n - lo))
            yield b.set_column(4, schema.field(4), pc.add(b.column(4), lo))

    def commit(self, end) -> None:
        pass


class MemSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "raftsink_bench_mem"

    def schema(self):
        return spark_schema(True)

    def streamReader(self, schema):
        return MemReader(self.options)


# ------------------------------------------------------------------ helpers


def produce(bootstrap: str, n: int, partitions: int = 2, topic: str = TOPIC) -> float:
    import confluent_kafka as ck

    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "batch.size": 1_000_000,
            "compression.type": "none",
        }
    )
    errors = []
    t0 = time.monotonic()
    for i in range(n):
        while True:
            try:
                p.produce(
                    topic,
                    key=b"k%d" % i,
                    value=VALUE,
                    partition=i % partitions,
                    on_delivery=lambda e, m: e and errors.append(e),
                )
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
            print(f"\rproduced {i:,}/{n:,}", end="", file=sys.stderr, flush=True)
    assert p.flush(120) == 0 and not errors, errors[:3]
    dt = time.monotonic() - t0
    print(f"\rproduced {n:,} in {dt:.1f} s ({n / dt:,.0f} rec/s)", file=sys.stderr)
    return dt


def run_available_now(spark, reader, out_dir: str, tag: str) -> tuple[int, float]:
    """(rows, seconds in triggerExecution summed over the batches) of one availableNow run."""
    ckpt = os.path.join(out_dir, f"ckpt-{tag}")
    q = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", os.path.join(out_dir, f"out-{tag}"))
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    # Batches with rows only: the raftsink source's first batch of a new query reads nothing
    # (it resolves startingOffsets, once per query lifetime), which is not throughput.
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    secs = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
    for p in progress:
        print(tag, p["batchId"], p["numInputRows"], p["durationMs"], file=sys.stderr)
    return rows, secs


def freshness(spark, nodes: str, bootstrap: str, out_dir: str, seconds: float, rate: int):
    """Per-record produce -> visible-in-Parquet latency with a 1-second trigger."""
    import confluent_kafka as ck

    lat: list[float] = []
    stop = threading.Event()
    target = os.path.join(out_dir, "fresh")

    def sink(batch_df, batch_id: int) -> None:
        batch_df.persist()
        batch_df.write.mode("append").parquet(target)
        visible_ms = time.time() * 1000  # the batch's rows are readable from here on
        stamps = batch_df.selectExpr("unix_millis(timestamp) AS t").collect()
        batch_df.unpersist()
        lat.extend((visible_ms - r.t) / 1000 for r in stamps)

    def producer() -> None:
        p = ck.Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
            }
        )
        t0, i = time.monotonic(), 0
        while not stop.is_set():
            while i < (time.monotonic() - t0) * rate:  # pacing
                p.produce("fresh", key=b"k", value=VALUE)
                i += 1
            p.poll(0.005)
        p.flush(30)

    p = ck.Producer({"bootstrap.servers": bootstrap})
    p.produce("fresh", value=b"create")
    p.flush(30)
    q = (
        spark.readStream.format("raftsink")
        .option("raftsink.nodes", nodes)
        .option("subscribe", "fresh")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", os.path.join(out_dir, "ckpt-fresh"))
        .trigger(processingTime="1 second")
        .start()
    )
    while not q.recentProgress:  # wait for the first (resolution) batch
        q.awaitTermination(0.2)
    th = threading.Thread(target=producer, daemon=True)
    th.start()
    q.awaitTermination(seconds)
    stop.set()
    th.join()
    q.awaitTermination(3)
    q.stop()
    warm = lat[len(lat) // 10 :]  # drop the first tenth (JIT / worker warm-up)
    warm.sort()
    if not warm:
        return None, None, 0
    return warm[len(warm) // 2], warm[min(len(warm) - 1, int(len(warm) * 0.99))], len(warm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller run (about 1-2 minutes)")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    rows = args.rows or (200_000 if args.quick else 1_000_000)
    # The JVM keeps getting faster for the first several rounds (JIT of the Parquet
    # path): with 3 rounds the medians compared half-warm runs; 7 reach steady state.
    rounds = args.rounds or (2 if args.quick else 7)
    fresh_s = 10 if args.quick else 30
    if args.quick:
        print(
            "--quick: 200k rows, 2 rounds, 10 s freshness (about 1 minute; Spark start-up dominates)",
            file=sys.stderr,
        )

    from pyspark.sql import SparkSession

    from connectors.spark import register
    from sink.process_cluster import SinkProcessCluster

    base = tempfile.mkdtemp(prefix="raftsink-bench-spark-")
    cluster = SinkProcessCluster(os.path.join(base, "cluster"), 3, default_partitions=2)
    cluster.start()
    t_start = time.monotonic()
    try:
        asyncio.run(cluster.wait_ready(timeout=60))
        produce(cluster.bootstrap_servers, rows)
        produce(cluster.bootstrap_servers, 100_000, topic="warm")
        # Followers may still be applying the backlog: measure a settled cluster.
        asyncio.run(cluster.wait_settled())
        nodes = ",".join(p.read_api for p in cluster.peers.values())
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("raftsink-bench")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(MemSource)
        per_part = max(1, rows // 8)

        def raftsink_reader(topic: str = TOPIC):
            return (
                spark.readStream.format("raftsink")
                .option("raftsink.nodes", nodes)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("maxRecordsPerPartition", str(per_part))
            )

        def mem_reader(n: int):
            return (
                spark.readStream.format("raftsink_bench_mem")
                .option("rows", str(n))
                .option("perPartition", str(per_part))
            )

        # Warm-up: JVM (JIT of the Parquet path), Python workers and their imports (grpc,
        # aiokafka) for both sources; without it the first measured run was ~30% slower.
        run_available_now(spark, mem_reader(min(rows, 200_000)), base, "warmup-mem")
        run_available_now(spark, raftsink_reader("warm"), base, "warmup-src")
        src, mem = [], []
        for r in range(rounds):
            n, s = run_available_now(spark, raftsink_reader(), base, f"src{r}")
            assert n == rows, f"source read {n} rows, expected {rows}"
            src.append(n / s)
            n, s = run_available_now(spark, mem_reader(rows), base, f"mem{r}")
            mem.append(n / s)
            print(
                f"round {r}: raftsink {src[-1]:,.0f} rows/s, in-memory {mem[-1]:,.0f} rows/s",
                file=sys.stderr,
            )
        p50, p99, nfresh = freshness(spark, nodes, cluster.bootstrap_servers, base, fresh_s, 1000)
        rows_per_s, ceiling = statistics.median(src), statistics.median(mem)
        result = {
            "bench": "spark_source",
            "quick": args.quick,
            "rows": rows,
            "record_bytes": len(VALUE),
            "rounds": rounds,
            "rows_per_s": round(rows_per_s),
            "ceiling_rows_per_s": round(ceiling),
            "ratio": round(rows_per_s / ceiling, 3),
            "round_ratios": [round(a / b, 3) for a, b in zip(src, mem, strict=True)],
            "freshness_p50_s": None if p50 is None else round(p50, 3),
            "freshness_p99_s": None if p99 is None else round(p99, 3),
            "freshness_records": nfresh,
            "spark_master": "local[2]",
            "elapsed_s": round(time.monotonic() - t_start, 1),
        }
        print(json.dumps(result))
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
