"""The raftsink Spark source against a real 3-node SinkProcessCluster.

1. Batch read returns exactly what confluent-kafka producers wrote (key, value, headers,
   offsets, timestamps), through two codecs; bad input gives actionable errors.
2. End to end exactly-once: idempotent producers (acks=all) write while the Raft leader is
   killed -9 and restarted; a streaming driver (its own process group, two queries: Parquet
   file sink and a foreachBatch sink idempotent by batch id) is killed -9 at seeded random
   moments and restarted on the same checkpoints; a final availableNow run drains. Spark's read
   of each output must hold every acknowledged record exactly once, offsets dense per
   partition, and (foreachBatch, which knows batch ids) batches in offset order.

Synchronisation is by polling observable state with deadlines (checkpoint files, delivery
reports, cluster status); the only sleeps are the seeded fault-injection delays and the
producers' pacing. This file is also the streaming driver: `python test_spark_source.py driver`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.crash]

TOPICS = ("e2e-a", "e2e-b")  # 2 partitions each (default_partitions=2)


def spark_env() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must see the installed package
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


def new_session(app: str):
    spark_env()
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    builder = (
        # local[N,F]: F attempts per task. Plain local[N] fails the query at a task's first
        # failure, e.g. a Python worker that a loaded machine did not start within Spark's
        # connect-back timeout; a retried task re-reads the same offset range (exactly once).
        SparkSession.builder.master("local[2,4]")
        .appName(app)
        .config("spark.python.authenticate.socketTimeout", "60s")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.fileSink.log.compactInterval", "4")
    )
    try:
        spark = builder.getOrCreate()
    except PySparkRuntimeError as exc:
        # The JVM gateway exiting at its start is the test machine's (tests/conftest.py,
        # GRPC_ENABLE_FORK_SUPPORT), not the source's: one more start, said aloud.
        if "JAVA_GATEWAY_EXITED" not in str(exc):
            raise
        print(f"Spark's JVM gateway exited at its start ({exc}); starting it once more")
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from connectors.spark import register

    register(spark)
    return spark


# --------------------------------------------------------------------------- the driver


def driver_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fb-out", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--available-now", action="store_true")
    a = ap.parse_args(argv)
    spark = new_session("raftsink-e2e-driver")
    df = (
        spark.readStream.format("raftsink")
        .option("raftsink.nodes", a.nodes)
        .option("subscribe", ",".join(TOPICS))
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20000")
        .option("pipelineId", "e2e")
        .load()
    )

    def write_batch(batch_df, batch_id: int) -> None:
        # Idempotent by batch id: a replayed batch (same id, same offsets) finds its
        # directory and is skipped; the rename makes the write all-or-nothing.
        final = os.path.join(a.fb_out, f"batch_id={batch_id}")
        if os.path.exists(final):
            print(f"skip already-written batch {batch_id}", flush=True)
            return
        tmp = os.path.join(a.fb_out, f"_tmp-{batch_id}-{uuid.uuid4().hex}")
        batch_df.write.parquet(tmp)
        os.rename(tmp, final)

    trig = {"availableNow": True} if a.available_now else {"processingTime": "1 second"}
    q1 = (
        df.writeStream.format("parquet")
        .option("path", a.out)
        .option("checkpointLocation", os.path.join(a.ckpt, "parquet"))
        .trigger(**trig)
        .start()
    )
    # The second query starts once the first has finished a batch (available-now: once it
    # has drained). Spark 4's Python streaming source runner adds its worker settings to the
    # data source function's shared env map when a query starts (StreamingSourcePythonRunner
    # .init); a query starting while another one serializes its first tasks produced a task
    # that no attempt could deserialize (java.io.OptionalDataException in HashMap.readObject).
    if a.available_now:
        q1.awaitTermination()
    else:
        deadline = time.monotonic() + 300
        while q1.lastProgress is None and q1.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
    q2 = (
        df.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", os.path.join(a.ckpt, "foreach"))
        .trigger(**trig)
        .start()
    )
    if a.available_now:
        q2.awaitTermination()
        print("drained", flush=True)
    else:
        spark.streams.awaitAnyTermination()


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "driver":
    driver_main(sys.argv[2:])
    sys.exit(0)


# --------------------------------------------------------------------------- fixtures

ck = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from sink.process_cluster import SinkProcessCluster

    c = SinkProcessCluster(str(tmp_path_factory.mktemp("spark-sink")), 3, default_partitions=2)
    c.start()
    try:
        asyncio.run(c.wait_ready(timeout=60))
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def spark():
    s = new_session("raftsink-tests")
    yield s
    s.stop()


def read_api_nodes(c) -> str:
    return ",".join(p.read_api for p in c.peers.values())


def producer(c, **conf):
    return ck.Producer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            **conf,
        }
    )


def wait_for(cond, timeout: float, what: str, check=None, restart_s: float = 0.0) -> None:
    """Poll cond() until true; check() may raise early (e.g. a process died). check()
    returning True means what cond() waits on was restarted: the wait then gets at least
    restart_s more from that moment."""
    deadline = time.monotonic() + timeout
    while not cond():
        if check is not None and check():
            deadline = max(deadline, time.monotonic() + restart_s)
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# --------------------------------------------------------------------------- 1. batch


def test_batch_read_returns_exactly_what_was_produced(cluster, spark):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    expected = {}
    for codec, topic in (("zstd", "batch-z"), ("lz4", "batch-l")):
        p = producer(cluster, **{"compression.type": codec})
        t0 = int(time.time() * 1000)  # recent: older than retention.ms would be expired
        for i in range(400):
            key = None if i % 7 == 0 else f"k{i}".encode()
            value = rng.randbytes(rng.randint(0, 300))
            headers = [("n", str(i).encode()), ("dup", b"x"), ("dup", None)] if i % 3 else []
            ts = t0 + i * 1000 + rng.randrange(1000)

            def on_delivery(err, msg, rec=(key, value, headers, ts)):
                assert err is None, err
                expected[(msg.topic(), msg.partition(), msg.offset())] = rec

            p.produce(
                topic,
                key=key,
                value=value,
                headers=headers,
                partition=i % 2,
                timestamp=ts,
                on_delivery=on_delivery,
            )
            p.poll(0)
        assert p.flush(60) == 0
    assert len(expected) == 800

    df = (
        spark.read.format("raftsink")
        .option("raftsink.nodes", read_api_nodes(cluster))
        .option("subscribePattern", "batch-.*")
        .option("minPartitions", "5")
        .load()
        .selectExpr("*", "unix_millis(timestamp) AS ts_ms")
    )
    rows = df.collect()
    assert len(rows) == 800
    for r in rows:
        key, value, headers, ts = expected[(r.topic, r.partition, r.offset)]
        assert r.key == key and r.value == value, (r.topic, r.partition, r.offset)
        assert [(h.key, h.value) for h in (r.headers or [])] == headers
        assert r.ts_ms == ts
        assert r.timestampType == 0
    for topic, part, n in (
        spark.read.format("raftsink")
        .option("raftsink.nodes", read_api_nodes(cluster))
        .option("subscribe", "batch-z")
        .option("startingOffsets", '{"batch-z": {"0": 5}}')
        .option("endingOffsets", '{"batch-z": {"0": 10, "1": -1}}')
        .load()
        .groupBy("topic", "partition")
        .count()
        .collect()
    ):
        assert n == (5 if part == 0 else 200), (topic, part, n)


def test_actionable_errors(cluster, spark):
    base = spark.read.format("raftsink").option("raftsink.nodes", read_api_nodes(cluster))
    with pytest.raises(Exception, match="not found in the raftsink cluster"):
        base.option("subscribe", "no-such-topic").load().count()
    with pytest.raises(Exception, match=r"unreachable.*127\.0\.0\.1:1 "):
        (
            spark.read.format("raftsink")
            .option("raftsink.nodes", "127.0.0.1:1")
            .option("retryTimeoutMs", "300")
            .option("subscribe", "x")
            .load()
            .count()
        )
    with pytest.raises(Exception, match="beyond the high watermark"):
        base.option("subscribe", "batch-z").option(
            "endingOffsets", '{"batch-z": {"0": 100000}}'
        ).load().count()


# --------------------------------------------------------------------------- 2. e2e


class Producers:
    """Idempotent acks=all producers writing at a paced rate until stopped."""

    def __init__(self, c, n: int = 2, rate_per_s: int = 300) -> None:
        self.c, self.rate = c, rate_per_s
        self.acked: list[tuple[str, int, int, bytes, bytes]] = []
        self.failed = 0
        self.errors: collections.Counter[str] = collections.Counter()  # why deliveries failed
        self.sent = 0
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(n)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def run(self, pid: int) -> None:
        p = producer(self.c)

        def on_delivery(err, msg) -> None:
            if err is None:
                self.acked.append(
                    (msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
                )
            else:
                self.failed += 1
                self.errors[f"{msg.topic()}/{msg.partition()}: {err.name()} {err.str()}"] += 1

        seq, t0 = 0, time.monotonic()
        while not self.stop_flag.is_set():
            due = int((time.monotonic() - t0) * self.rate)  # pacing, not synchronisation
            while seq < due:
                key = f"p{pid}-{seq}".encode()
                p.produce(TOPICS[seq % 2], key=key, value=key * 8, on_delivery=on_delivery)
                seq += 1
                self.sent += 1
            p.poll(0.02)
        assert p.flush(120) == 0

    def stop(self) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(180)


FIRST_BATCH_S = 240.0


def count_commits(ckpt: str) -> int:
    d = os.path.join(ckpt, "parquet", "commits")
    return len([f for f in os.listdir(d) if f.isdigit()]) if os.path.isdir(d) else 0


_DRIVERS: list[subprocess.Popen] = []
"""Driver processes started by the running test; killed at its end, pass or fail (each is a
Python process and a JVM in their own session, which nothing else would reap)."""


@pytest.fixture
def reap_drivers():
    yield
    while _DRIVERS:
        proc = _DRIVERS.pop()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_driver(c, paths: dict, log_path: str, available_now: bool = False):
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "driver",
        "--nodes",
        read_api_nodes(c),
        "--out",
        paths["out"],
        "--fb-out",
        paths["fb"],
        "--ckpt",
        paths["ckpt"],
    ] + (["--available-now"] if available_now else [])
    # Own process group: SIGKILL reaches the Python driver and its JVM at once.
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=log, start_new_session=True, cwd=os.path.dirname(paths["out"])
        )
    _DRIVERS.append(proc)
    return proc


def tail(path: str, n: int = 3000, start: int = 0) -> str:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read()[-n:].decode(errors="replace")


class Driver:
    """A driver process that is restarted when it died of SPARK_WORKER_TIMEOUT (Spark's
    hard-coded 10 s worker connect-back limit: tests/helpers/spark_workers.py), at most
    MAX_WORKER_TIMEOUTS times per test; any other exit fails the test."""

    restarts = 0  # per test: reset by the test

    def __init__(self, cluster, paths: dict, log_path: str, available_now: bool = False) -> None:
        self.args = (cluster, paths, log_path)
        self.available_now = available_now
        self.log_path = log_path
        self._start()

    def _start(self) -> None:
        self.log_start = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        self.proc = start_driver(*self.args, available_now=self.available_now)

    def _restartable(self) -> bool:
        # Imported here: this file also runs as the driver script, where `tests` is not a package.
        from tests.helpers.spark_workers import MAX_WORKER_TIMEOUTS, SPARK_WORKER_TIMEOUT

        text = tail(self.log_path, 10**7, self.log_start)
        if SPARK_WORKER_TIMEOUT in text and Driver.restarts < MAX_WORKER_TIMEOUTS:
            Driver.restarts += 1
            print(
                f"driver exited on Spark's worker connect-back timeout: restart {Driver.restarts}"
            )
            self._start()
            return True
        return False

    def check_alive(self) -> bool:
        """Raises when the driver died of anything but a restartable cause; True when it was
        restarted just now."""
        if self.proc.poll() is None:
            return False
        if self._restartable():
            return True
        raise AssertionError(
            f"driver exited {self.proc.returncode}: {tail(self.log_path, start=self.log_start)}"
        )

    def wait(self, timeout: float) -> int:
        while True:
            code = self.proc.wait(timeout)
            if code == 0 or not self._restartable():
                return code

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def test_exactly_once_through_leader_and_driver_kills(cluster, spark, tmp_path, reap_drivers):
    seed = int(os.environ.get("RAFTSINK_E2E_SEED", random.randrange(1 << 30)))
    print("seed", seed, "(set RAFTSINK_E2E_SEED to replay)")
    rng = random.Random(seed)
    paths = {k: str(tmp_path / k) for k in ("out", "fb", "ckpt")}
    os.makedirs(paths["fb"])
    log_path = str(tmp_path / "driver.log")

    # The topics must exist before a subscribe query starts.
    p = producer(cluster)
    for t in TOPICS:
        for part in (0, 1):
            p.produce(t, key=b"init", value=b"init", partition=part)
    assert p.flush(60) == 0
    prods = Producers(cluster)
    prods.start()

    # Two driver kills, the first after a leader kill -9 under the running query (a
    # second leader kill added 60 s to CI and no new path: test_spark_secure kills
    # leaders during batch reads).
    kills = 2
    Driver.restarts = 0

    def next_batch(after: int, timeout: float) -> None:
        # A driver's first batch includes its JVM start and its Python workers' first
        # connect-back: minutes on a loaded machine (CI runs two test workers beside it).
        # A driver restarted while waiting gets that allowance again.
        try:
            wait_for(
                lambda: count_commits(paths["ckpt"]) > after,
                timeout,
                "a batch",
                driver.check_alive,
                FIRST_BATCH_S,
            )
        except TimeoutError as exc:
            log = tail(log_path, start=driver.log_start)
            raise TimeoutError(f"{exc}; the driver's log:\n{log}") from None

    for run in range(kills):
        before = count_commits(paths["ckpt"])
        driver = Driver(cluster, paths, log_path)
        next_batch(before, FIRST_BATCH_S)
        if run == 0:  # kill -9 the Raft leader while producers and the query run
            leader = asyncio.run(cluster.wait_ready(timeout=30))
            cluster.kill(leader)
            asyncio.run(cluster.wait_ready(timeout=30))
            cluster.start(leader)
            print(f"run {run}: killed and restarted leader {leader}")
            next_batch(count_commits(paths["ckpt"]), 120)
        delay = rng.uniform(0.0, 2.5)
        time.sleep(delay)  # fault injection: the kill lands at a seeded random moment
        driver.check_alive()
        driver.kill()
        print(
            f"run {run}: driver killed after {count_commits(paths['ckpt'])} commits (+{delay:.2f} s)"
        )

    prods.stop()
    asyncio.run(cluster.wait_ready(timeout=30))
    print(f"produced {prods.sent}, acknowledged {len(prods.acked)}, failed {prods.failed}")
    assert prods.acked and prods.failed == 0, f"failed deliveries: {dict(prods.errors)}"

    final = Driver(cluster, paths, log_path, available_now=True)
    assert final.wait(240) == 0, tail(log_path, start=final.log_start)

    # librdkafka acknowledges a record without an offset when its request's outcome was
    # unknown (a timeout at a killed leader) and a later request of the same producer and
    # partition succeeded, which proves it was written ("implicit ack",
    # rd_kafka_dr_implicit_ack). Those are found by their (unique) key instead.
    acked = {(t, pt, o): (k, v) for t, pt, o, k, v in prods.acked if o is not None and o >= 0}
    implicit = [(t, pt, k, v) for t, pt, o, k, v in prods.acked if o is None or o < 0]
    assert len(acked) + len(implicit) == len(prods.acked)  # never two acks at one offset

    def check(rows, what: str) -> None:
        seen = {}
        for r in rows:
            k = (r.topic, r.partition, r.offset)
            assert k not in seen, f"{what}: duplicate {k}"
            seen[k] = (r.key, r.value)
        missing = [k for k in acked if k not in seen]
        assert not missing, (
            f"{what}: {len(missing)} acknowledged records missing, e.g. {missing[:3]}"
        )
        wrong = [k for k, kv in acked.items() if seen[k] != kv]
        assert not wrong, f"{what}: different content at {wrong[:3]}"
        by_key = collections.Counter((t, pt, kv) for (t, pt, _o), kv in seen.items())
        unfound = [r for r in implicit if by_key[(r[0], r[1], (r[2], r[3]))] != 1]
        assert not unfound, f"{what}: implicitly acknowledged records not there once: {unfound[:3]}"
        for t in TOPICS:
            for part in (0, 1):
                offs = sorted(o for (tt, pp, o) in seen if (tt, pp) == (t, part))
                assert offs == list(range(len(offs))), f"{what}: offsets of {t}/{part} not dense"
        print(
            f"{what}: {len(seen)} rows = {len(acked)} + {len(implicit)} (implicitly) acknowledged"
            f" + {len(seen) - len(acked) - len(implicit)} topic-creating init records;"
            " 0 duplicates, 0 missing"
        )

    cols = ["topic", "partition", "offset", "key", "value"]
    check(spark.read.parquet(paths["out"]).select(*cols).collect(), "parquet file sink")
    fb = spark.read.parquet(paths["fb"]).select("batch_id", *cols).collect()
    check(fb, "foreachBatch sink")
    # Batches in offset order: per partition, batch N+1 starts where batch N ended.
    spans: dict = {}
    for r in fb:
        lo, hi = spans.get((r.topic, r.partition, r.batch_id), (r.offset, r.offset))
        spans[(r.topic, r.partition, r.batch_id)] = (min(lo, r.offset), max(hi, r.offset))
    for t in TOPICS:
        for part in (0, 1):
            ranges = sorted(v for (tt, pp, _b), v in sorted(spans.items()) if (tt, pp) == (t, part))
            by_batch = [v for (tt, pp, _b), v in sorted(spans.items()) if (tt, pp) == (t, part)]
            assert by_batch == ranges, f"{t}/{part}: batches out of offset order"
            assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
