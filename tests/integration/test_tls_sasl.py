"""SASL_SSL: SASL (SCRAM-SHA-512, PLAIN) over the TLS Kafka listener, the two halves of
issue 15 together on a 3-node cluster of `raftsink serve` processes (Raft mutual TLS too).
confluent-kafka produces idempotently through a follower (its InitProducerId may be
relayed to the leader: over TLS, logged in as the relay user) and reads back; a wrong
password over TLS fails clearly and the nodes keep serving."""

from __future__ import annotations

import asyncio
import time

import pytest

from sink.process_cluster import SinkProcessCluster
from tests.helpers.tls_certs import Certs

ck = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402, F401  (ck.admin.AdminClient)

ADMIN = ("admin", "admin-secret")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, certs):
    c = SinkProcessCluster(
        str(tmp_path_factory.mktemp("sasl-ssl")),
        extra_args=[
            "--tls-ca-file",
            certs.ca,
            "--tls-kafka",
            "--tls-raft",
            "--sasl-enabled",
            "--sasl-bootstrap-users",
            f"{ADMIN[0]}:{ADMIN[1]}",
        ],
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


def _conf(certs: Certs, mechanism: str, password: str = ADMIN[1]) -> dict:
    return {
        "security.protocol": "sasl_ssl",
        "ssl.ca.location": certs.ca,
        "sasl.mechanism": mechanism,
        "sasl.username": ADMIN[0],
        "sasl.password": password,
    }


def _until_logged_in(bootstrap: str, conf: dict, timeout: float = 60.0) -> None:
    """The bootstrap user is applied through the log: wait until a node accepts it."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            ck.admin.AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(timeout=5)
            return
        except ck.KafkaException as exc:
            last = exc
    raise TimeoutError(f"no SASL_SSL login within {timeout} s: {last}")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_sasl_ssl_idempotent_produce_and_consume_through_a_follower(cluster, certs, mechanism):
    leader = asyncio.run(cluster.wait_ready(60))
    follower = next(i for i in cluster.peers if i != leader)
    boot = cluster.peers[follower].kafka
    conf = _conf(certs, mechanism)
    _until_logged_in(boot, conf)
    topic = f"sasl-ssl-{mechanism.lower()}"
    p = ck.Producer({"bootstrap.servers": boot, "enable.idempotence": True, **conf})
    errors: list = []
    for i in range(20):
        p.produce(topic, value=b"v%d" % i, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(60) == 0
    assert errors == [None] * 20
    c = ck.Consumer(
        {"bootstrap.servers": boot, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
        | conf
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [b"v%d" % i for i in range(20)]


def test_sasl_ssl_wrong_password_is_refused(cluster, certs):
    _until_logged_in(cluster.bootstrap_servers, _conf(certs, "SCRAM-SHA-512"))
    bad = _conf(certs, "SCRAM-SHA-512", password="wrong")
    with pytest.raises(ck.KafkaException):
        ck.admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **bad}).list_topics(
            timeout=5
        )
    assert cluster.exited() == {}
