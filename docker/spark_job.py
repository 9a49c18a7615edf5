"""The compose file's Spark demo job: producers -> raftsink cluster -> Spark -> Parquet.

Idempotent confluent-kafka producers (acks=all) write RAFTSINK_DEMO_RECORDS records to a few
topics through the cluster's Kafka listener (RAFTSINK_BOOTSTRAP) while a Structured Streaming
query reads them with the raftsink source (RAFTSINK_NODES = read API addresses) into a Parquet
table with a checkpoint under RAFTSINK_DEMO_OUT. A final availableNow run drains; the table is
read back and compared with what the producers had acknowledged. Exit 0 when nothing is
missing or duplicated. Re-running continues from the checkpoint (the summary then counts only
this run's records, which must each be present exactly once).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid

TOPICS = ("orders", "clicks", "payments")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main() -> int:
    from confluent_kafka import Producer

    bootstrap = os.environ.get("RAFTSINK_BOOTSTRAP", "node1:9092,node2:9092,node3:9092")
    nodes = os.environ.get("RAFTSINK_NODES", "node1:7101,node2:7101,node3:7101")
    total = int(os.environ.get("RAFTSINK_DEMO_RECORDS", "30000"))
    base = os.environ.get("RAFTSINK_DEMO_OUT", "/data/spark-demo")
    out, ckpt = os.path.join(base, "table"), os.path.join(base, "checkpoint")
    run_id = uuid.uuid4().hex[:8]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
        }
    )
    acked: set[tuple[str, bytes]] = set()
    failed = [0]

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.add((msg.topic(), msg.value()))
        else:
            failed[0] += 1

    for t in TOPICS:  # creates the topics before the query subscribes
        producer.produce(t, b"warm-up")
    if producer.flush(120) != 0:
        log(f"cannot reach the cluster at {bootstrap}")
        return 1
    log(f"cluster reachable at {bootstrap}; read API nodes {nodes}")

    sent = [0]

    def produce() -> None:
        for i in range(total):
            topic = TOPICS[i % len(TOPICS)]
            value = json.dumps({"run": run_id, "id": i, "amount": i % 997}).encode()
            while True:
                try:
                    producer.produce(
                        topic, key=str(i % 101).encode(), value=value, on_delivery=on_delivery
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            sent[0] += 1
            producer.poll(0)
        producer.flush(180)

    from connectors.spark import local_session

    log("starting Spark (local[2])")
    spark = local_session("raftsink-compose-demo")

    def stream(available_now: bool):
        w = (
            spark.readStream.format("raftsink")
            .option("raftsink.nodes", nodes)
            .option("subscribe", ",".join(TOPICS))
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ckpt)
        )
        w = w.trigger(availableNow=True) if available_now else w.trigger(processingTime="1 second")
        return w.start()

    query = stream(available_now=False)
    thread = threading.Thread(target=produce, daemon=True)
    t0 = time.monotonic()
    thread.start()
    while thread.is_alive():
        thread.join(2.0)
        done = query.recentProgress  # the finished micro-batches (the last 100)
        rows = sum(p.get("numInputRows", 0) for p in done)
        batch = done[-1].get("batchId", "-") if done else "-"
        log(
            f"produced {sent[0]}/{total}, acknowledged {len(acked)}; "
            f"spark read {rows} rows (batches 0-{batch} done)"
        )
    query.stop()
    log("producers done; draining with an availableNow run")
    stream(available_now=True).awaitTermination()

    seen: dict[tuple[str, bytes], int] = {}
    for r in spark.read.parquet(out).select("topic", "value").collect():
        value = bytes(r["value"])
        if run_id.encode() in value:
            k = (r["topic"], value)
            seen[k] = seen.get(k, 0) + 1
    spark.stop()
    mine = {k for k in acked if run_id.encode() in k[1]}
    summary = {
        "records_produced": sent[0],
        "records_acknowledged": len(mine),
        "rows_in_parquet": sum(seen.values()),
        "duplicates": sum(v - 1 for v in seen.values()),
        "missing": len(mine - set(seen)),
        "failed_deliveries": failed[0],
        "elapsed_s": round(time.monotonic() - t0, 1),
        "table": out,
    }
    print(json.dumps(summary), flush=True)
    ok = summary["duplicates"] == 0 and summary["missing"] == 0 and failed[0] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
