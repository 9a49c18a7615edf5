"""The main job: Kafka producers -> 3-node raftsink -> Spark Structured Streaming -> Parquet.

1. starts a local 3-node cluster (`raftsink local`, processes, fsync on);
2. idempotent confluent-kafka producers write a sample stream to a few topics
   (progress shown), while
3. a Structured Streaming query reads `format("raftsink")` into a Parquet table
   with a checkpoint (1 s trigger);
4. the Raft leader is killed with SIGKILL once mid-way (and restarted);
5. a final availableNow run drains what is left, Spark reads the table back
   (honouring _spark_metadata), and a summary table compares it with what the
   producers had acknowledged: duplicates and missing records must be 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import threading
import time

TOPICS = ("orders", "clicks", "payments")
PARTITIONS = 3


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Producers:
    """Idempotent producers in a thread; remembers every acknowledged record."""

    def __init__(self, bootstrap: str, total: int) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
                "metadata.max.age.ms": 1_000,
                # Connection errors during the leader kill are expected; the
                # demo reports delivery outcomes itself.
                "log_level": 2,
            }
        )
        self.total = total
        self.rate_per_s = 10_000
        self.started_at = 0.0
        self.finished_at = 0.0
        self.sent = 0
        self.acked: set[tuple[str, bytes]] = set()
        self.failed = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked.add((msg.topic(), msg.value()))
        else:
            self.failed += 1

    def _run(self) -> None:
        p = self.producer
        rate_per_s = self.rate_per_s
        start = self.started_at = time.monotonic()
        while self.sent < self.total:
            due = start + self.sent / rate_per_s
            delay = due - time.monotonic()
            if delay > 0:
                p.poll(delay)
            topic = TOPICS[self.sent % len(TOPICS)]
            value = json.dumps(
                {"id": self.sent, "topic": topic, "amount": self.sent % 997}
            ).encode()
            while True:
                try:
                    p.produce(
                        topic,
                        key=str(self.sent % 101).encode(),
                        value=value,
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:
                    p.poll(0.05)
            self.sent += 1
            p.poll(0)
        p.flush(180)
        self.finished_at = time.monotonic()
        self.done.set()


def _last_batch(progress: list[dict]) -> int | str:
    """The id of the newest finished micro-batch in query.recentProgress ("-": none)."""
    return progress[-1].get("batchId", "-") if progress else "-"


def run_pipeline(data_dir: str | None = None, records: int = 150_000, keep: bool = False) -> int:
    from connectors.spark import local_session
    from sink.process_cluster import SinkProcessCluster

    own = data_dir is None
    base = os.path.abspath(data_dir or tempfile.mkdtemp(prefix="raftsink-demo-"))
    out, ckpt = os.path.join(base, "table"), os.path.join(base, "checkpoint")
    t_start = time.monotonic()
    _log(f"raftsink demo: data in {base}")
    cluster = SinkProcessCluster(os.path.join(base, "cluster"), default_partitions=PARTITIONS)
    cluster.start()
    spark = None
    try:
        leader = asyncio.run(cluster.wait_ready())
        _log(
            f"3-node cluster up, leader node {leader}; Kafka bootstrap {cluster.bootstrap_servers}"
        )
        nodes = ",".join(p.read_api for p in cluster.peers.values())
        producers = Producers(cluster.bootstrap_servers, records)
        producers.producer.produce(TOPICS[0], b"warm-up", on_delivery=producers._on_delivery)
        producers.producer.flush(60)  # creates the topic, PID handshake
        producers.acked.clear()
        for t in TOPICS[1:]:
            producers.producer.produce(t, b"warm-up")
        producers.producer.flush(60)

        _log("starting Spark (local[2]); the first micro-batch takes a while")
        spark = local_session("raftsink-demo")

        def stream(available_now: bool):
            df = (
                spark.readStream.format("raftsink")
                .option("raftsink.nodes", nodes)
                .option("subscribe", ",".join(TOPICS))
                .option("startingOffsets", "earliest")
                .load()
            )
            w = (
                df.writeStream.format("parquet")
                .option("path", out)
                .option("checkpointLocation", ckpt)
            )
            w = (
                w.trigger(availableNow=True)
                if available_now
                else w.trigger(processingTime="1 second")
            )
            return w.start()

        query = stream(available_now=False)
        while query.lastProgress is None and query.isActive:  # Spark's first batch
            query.awaitTermination(0.5)
        _log(f"streaming query running; producing {records} records at ~{producers.rate_per_s}/s")
        producers.thread.start()
        killed = False
        last_batch, since = _last_batch(query.recentProgress), time.monotonic()
        while not producers.done.is_set():
            producers.done.wait(2.0)
            done = query.recentProgress  # the finished micro-batches (the last 100)
            rows = sum(p.get("numInputRows", 0) for p in done)
            batch = _last_batch(done)
            if batch != last_batch:
                last_batch, since = batch, time.monotonic()
            # A micro-batch on two cores shared with the cluster and the producers can take
            # several seconds (the first one with data starts Spark's Python workers): say
            # that one runs, so a long batch does not read as a stalled query.
            running = (
                f", batch {batch + 1 if isinstance(batch, int) else 0} running "
                f"{time.monotonic() - since:.0f} s"
                if query.status.get("isTriggerActive") and query.status.get("isDataAvailable")
                else ""
            )
            _log(
                f"produced {producers.sent:>7}/{records}, acknowledged {len(producers.acked):>7}; "
                f"spark read {rows:>7} rows (batches 0-{batch} done{running})"
            )
            if not killed and producers.sent >= records // 2:
                _log(f"kill -9 the Raft leader (node {leader})")
                cluster.kill(leader)
                victim = leader
                leader = asyncio.run(cluster.wait_ready(exclude=victim))
                _log(f"node {leader} leads now; restarting node {victim}")
                cluster.start(victim)
                killed = True
        _log("producers done; letting the streaming query catch up")
        query.processAllAvailable()
        query.stop()
        _log("query stopped; a final availableNow run on the same checkpoint drains anything left")
        stream(available_now=True).awaitTermination()

        table = spark.read.parquet(out)
        rows = table.select("topic", "value").collect()
        seen: dict[tuple[str, bytes], int] = {}
        for r in rows:
            k = (r["topic"], bytes(r["value"]))
            seen[k] = seen.get(k, 0) + 1
        warm = {k for k in seen if k[1] == b"warm-up"}
        stored = {k: v for k, v in seen.items() if k not in warm}
        duplicates = sum(v - 1 for v in stored.values())
        missing = len(producers.acked - set(stored))
        elapsed = time.monotonic() - t_start
        produce_s = max(producers.finished_at - producers.started_at, 1e-9)
        summary = {
            "records_produced": producers.sent,
            "records_acknowledged": len(producers.acked),
            "rows_in_parquet": sum(stored.values()),
            "duplicates": duplicates,
            "missing": missing,
            "failed_deliveries": producers.failed,
            "leader_killed": killed,
            "elapsed_s": round(elapsed, 1),
            "produce_records_per_s": round(len(producers.acked) / produce_s),
        }
        print("\nsummary")
        for k, v in summary.items():
            print(f"  {k.replace('_', ' '):<26} {v}")
        print(json.dumps(summary))
        return 0 if duplicates == 0 and missing == 0 and producers.failed == 0 else 1
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        if own and not keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_pipeline())
