"""The Spark source on a secure cluster, exactly once across leader kills (issue 15).

Three `raftsink serve` processes with TLS on every listener (Raft and read API mutual TLS),
SASL_SSL SCRAM-SHA-512 and authorization on (super user admin). An idempotent SASL_SSL
producer writes while the Raft leader is killed -9 and restarted; then the new leader is
killed and stays down while Spark reads the topic in one batch through `raftsink.ssl.*`
(its read path must fail over to the surviving nodes over mutual TLS). The batch holds
every acknowledged record exactly once, at its acknowledged offset, offsets dense.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading

import pytest

from sink.process_cluster import SinkProcessCluster
from sink.readapi.client import tls_credentials
from tests.helpers.sasl_tools import until
from tests.helpers.tls_certs import Certs

pytestmark = [pytest.mark.slow, pytest.mark.crash]
ck = pytest.importorskip("confluent_kafka")
pytest.importorskip("pyspark")
import confluent_kafka.admin as cka  # noqa: E402

ADMIN = ("admin", "admin-secret")
TOPIC = "secure-eo"
PARTITIONS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, certs):
    c = SinkProcessCluster(
        str(tmp_path_factory.mktemp("spark-secure")),
        default_partitions=PARTITIONS,
        extra_args=[
            *("--tls-ca-file", certs.ca, "--tls-kafka", "--tls-read-api", "--tls-raft"),
            *("--sasl-enabled", "--sasl-bootstrap-users", f"{ADMIN[0]}:{ADMIN[1]}"),
            *("--authorization-super-users", f"User:{ADMIN[0]}"),
        ],
        read_api_credentials=tls_credentials(certs.ca, *certs.pair("client")),
        authorization=True,
    )
    for i, n in c.nodes.items():
        n.extra_args += ["--tls-cert-file", certs.cert(f"node{i}")]
        n.extra_args += ["--tls-key-file", certs.key(f"node{i}")]
    c.start()
    try:
        asyncio.run(c.wait_ready(120))
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2,4]")
        .appName("raftsink-secure")
        .config("spark.python.authenticate.socketTimeout", "60s")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    from connectors.spark import register

    register(s)
    yield s
    s.stop()


def _kafka_conf(certs: Certs) -> dict:
    return {
        "security.protocol": "sasl_ssl",
        "ssl.ca.location": certs.ca,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": ADMIN[0],
        "sasl.password": ADMIN[1],
    }


def test_spark_reads_a_secure_cluster_exactly_once_across_leader_kills(cluster, certs, spark):
    seed = int(os.environ.get("RAFTSINK_SPARK_SEED", random.randrange(1 << 30)))
    print(f"seed={seed} (RAFTSINK_SPARK_SEED repeats it)")
    rng = random.Random(seed)
    conf = {"bootstrap.servers": cluster.bootstrap_servers, **_kafka_conf(certs)}
    # The bootstrap admin is written through the log: wait until a login works.
    admin = cka.AdminClient(conf)
    until(lambda: _metadata(admin), 60, "an admin login over SASL_SSL")

    acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    failed: list[str] = []
    p = ck.Producer(
        {**conf, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
         "message.timeout.ms": 120_000}
    )  # fmt: skip

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[msg.partition()][msg.offset()] = msg.value()

    stop = threading.Event()
    sent = [0]

    def produce() -> None:
        while not stop.is_set():
            v = f"r{sent[0]}".encode()
            try:
                p.produce(TOPIC, v, partition=sent[0] % PARTITIONS, on_delivery=on_delivery)
                sent[0] += 1
            except BufferError:
                pass
            p.poll(0.002)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        until(lambda: sum(map(len, acked.values())) >= rng.randint(300, 800), 60, "first acks")
        leader = asyncio.run(cluster.wait_ready(60))
        cluster.kill(leader)
        print(f"killed leader {leader} after {sum(map(len, acked.values()))} acks")
        new = asyncio.run(cluster.wait_ready(60, exclude=leader))
        n = sum(map(len, acked.values()))
        until(lambda: sum(map(len, acked.values())) > n + 200, 60, "acks from the new leader")
        cluster.start(leader)
        asyncio.run(cluster.wait_ready(60))
        until(lambda: sum(map(len, acked.values())) > n + 600, 60, "acks after the restart")
    finally:
        stop.set()
        t.join(30)
    assert p.flush(120) == 0
    assert not failed, failed[:3]
    assert sum(map(len, acked.values())) == sent[0]

    # Wait until every node holds every record (so the surviving two can serve the read),
    # then kill the current leader: the batch is read with it down.
    asyncio.run(cluster.wait_settled(120))
    down = asyncio.run(cluster.wait_ready(60))
    cluster.kill(down)
    print(f"{sent[0]} records acknowledged (leader {new} after the first kill); killed {down}")
    rows = (
        spark.read.format("raftsink")
        .option("raftsink.nodes", ",".join(p.read_api for p in cluster.peers.values()))
        .option("subscribe", TOPIC)
        .option("raftsink.ssl.cafile", certs.ca)
        .option("raftsink.ssl.certfile", certs.cert("client"))
        .option("raftsink.ssl.keyfile", certs.key("client"))
        .load()
        .select("partition", "offset", "value")
        .collect()
    )
    got: dict[int, dict[int, bytes]] = {q: {} for q in range(PARTITIONS)}
    for r in rows:
        assert r.offset not in got[r.partition], f"offset {r.partition}/{r.offset} twice"
        got[r.partition][r.offset] = bytes(r.value)
    for q in range(PARTITIONS):
        assert sorted(got[q]) == list(range(len(got[q]))), f"partition {q}: offsets not dense"
        assert got[q] == acked[q], f"partition {q}: read {len(got[q])}, acked {len(acked[q])}"
    values = [v for q in got.values() for v in q.values()]
    assert len(values) == len(set(values)) == sent[0]
    cluster.start(down)
    asyncio.run(cluster.wait_ready(60))


def _metadata(admin) -> bool:
    try:
        admin.list_topics(timeout=5)
        return True
    except ck.KafkaException:
        return False
