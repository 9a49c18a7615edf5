"""The secure container variant (docker/compose.secure.yaml's settings, docker/make-secure.sh's
files): TLS on both Kafka listeners, the read API and the Raft transport (mutual TLS between
nodes), SASL_SSL with SCRAM-SHA-512, authorization on with the super user admin.

One cluster start, several checks (CI time: docs/docker.md):
- from the host (external listener): the admin produces idempotently and reads back exactly
  once; a wrong password is refused; a user without ACLs (made with `raftsink users create`
  as the admin, over SASL_SSL) cannot write, and nothing of his is stored;
- from a container in the cluster's network (internal listener, names node1..node3): the
  admin produces idempotently over SASL_SSL; node1's Raft port completes no TLS session with
  a client certificate of another CA, and does with one of the cluster's CA (the control).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from tests.containers.container_cluster import RAFT_PORT, ROOT, wait_for
from tests.containers.kafka_util import AckingProducer, check_exactly_once, consume_all

PARTITIONS = 3
MAKE_CERTS = os.path.join(ROOT, "scripts", "make-certs.sh")

# Runs in the client image inside the cluster's network; the client files are at /c.
IN_NETWORK = r"""
import os, socket, ssl
from confluent_kafka import Producer

conf = {"bootstrap.servers": "node3:9092", "security.protocol": "sasl_ssl",
        "ssl.ca.location": "/c/ca.pem", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin", "sasl.password": os.environ["ADMIN_PASSWORD"],
        "enable.idempotence": True, "acks": "all"}
p = Producer(conf)
md = p.list_topics(timeout=20)
print("brokers", sorted(f"{b.host}:{b.port}" for b in md.brokers.values()))
acked = []
for i in range(100):
    p.produce("secure", f"in{i}".encode(), partition=0,
              on_delivery=lambda e, m: acked.append(e is None))
assert p.flush(60) == 0 and all(acked) and len(acked) == 100, acked
print("acked", len(acked))

# HTTP/2 client preface + an empty SETTINGS frame: a gRPC server that accepted the TLS
# session answers with its own SETTINGS frame (type 4).
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])

def raft_session(cert, key):
    ctx = ssl.create_default_context(cafile="/c/ca.pem")
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection(("node1", RAFT_PORT), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="node1") as s:
                s.sendall(PREFACE)
                data = s.recv(64)
                if len(data) >= 9 and data[3] == 4:
                    return "accepted"
                # TLS 1.3: the server checks the client's certificate after the client's
                # side of the handshake is done, then aborts: an alert or a bare close.
                return "refused: closed without a session" if not data else f"odd {data!r}"
    except (ssl.SSLError, ConnectionError) as exc:
        return f"refused {type(exc).__name__}: {exc}"

print("raft cluster-ca", raft_session("/c/client.pem", "/c/client.key"))
print("raft other-ca", raft_session("/c/rogue.pem", "/c/rogue.key"))
""".replace("RAFT_PORT", str(RAFT_PORT))


def _admin_conf(secure: str) -> dict[str, str]:
    """librdkafka settings from make-secure.sh's client.properties (as an operator uses it)."""
    with open(os.path.join(secure, "client", "client.properties")) as f:
        return dict(line.strip().split("=", 1) for line in f if "=" in line)


def _errors_of(conf: dict, timeout: float = 30) -> list[KafkaError]:
    """The client-level errors a producer reports while trying to get metadata."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
        with contextlib.suppress(Exception):  # failing is what we wait for
            p.list_topics(timeout=1)
    return errors


def _client_files(tmp_path, secure: str) -> str:
    """The client files plus a pair of another CA, readable by the client image's user."""
    d = tmp_path / "client-files"
    shutil.copytree(os.path.join(secure, "client"), d)
    rogue = tmp_path / "rogue"
    subprocess.run(["bash", MAKE_CERTS, str(rogue), "rogue"], check=True, capture_output=True)
    shutil.copy(rogue / "rogue.pem", d / "rogue.pem")
    shutil.copy(rogue / "rogue.key", d / "rogue.key")
    d.chmod(0o755)
    for f in d.iterdir():
        f.chmod(0o644)  # throw-away test files only
    return str(d)


def test_secure_cluster_sasl_ssl_acls_and_raft_mtls(
    secure_container_cluster, client_image, tmp_path
):
    t0 = time.monotonic()
    cluster = secure_container_cluster
    secure = cluster.secure_dir
    assert secure is not None
    admin = {"bootstrap.servers": cluster.bootstrap_servers, **_admin_conf(secure)}
    assert admin["security.protocol"] == "sasl_ssl"

    # The bootstrap admin is written through the log by the first leader: wait for a login.
    md = wait_for(
        lambda: _try(lambda: AdminClient(admin).list_topics(timeout=5)), 60, "the admin's login"
    )
    advertised = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
    assert advertised == {i: cluster.kafka_addr(i) for i in cluster.nodes}, advertised

    # Idempotent produce and exactly-once read back over SASL_SSL (external listener).
    conf = {k: v for k, v in admin.items() if k != "bootstrap.servers"}
    prod = AckingProducer(cluster.bootstrap_servers, "secure", PARTITIONS, **conf)
    prod.send(2_000)
    prod.flush(60)
    assert not prod.failed, prod.failed[:3]
    expected = {p: len(v) for p, v in prod.acked.items()}
    check_exactly_once(
        prod.acked, consume_all(cluster.bootstrap_servers, "secure", expected, **conf)
    )

    # A wrong password: refused with an authentication error (and the nodes keep serving).
    wrong = _errors_of({**admin, "sasl.password": "not-" + admin["sasl.password"]})
    assert any(e.code() == KafkaError._AUTHENTICATION for e in wrong), wrong

    # A user without ACLs, made with the CLI over SASL_SSL as the admin: cannot write.
    client_dir = os.path.join(secure, "client")
    r = subprocess.run(
        [
            sys.executable, "-m", "sink.cli", "users", "create", "bob",
            "--bootstrap-servers", cluster.kafka_addr(1), "--tls",
            "--tls-ca-file", os.path.join(client_dir, "ca.pem"),
            "--sasl-user", "admin", "--sasl-password-file", os.path.join(client_dir, "admin.password"),
        ],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "RAFTSINK_USER_PASSWORD": "bob-secret"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    bob = {**admin, "sasl.username": "bob", "sasl.password": "bob-secret"}

    def bob_produces() -> str:
        p = Producer({**bob, "message.timeout.ms": 10_000, "retries": 0})
        out: list[str] = []
        p.produce("secure", b"bob", partition=0, on_delivery=lambda e, m: out.append(str(e)))
        p.flush(30)
        return out[0] if out else "no report"

    # Until bob's user reached the node he asks, the error is a failed login or a timeout.
    denied = wait_for(
        lambda: (e := bob_produces()) and "TOPIC_AUTHORIZATION_FAILED" in e and e, 60, "bob refused"
    )
    print(f"bob: {denied}")

    # Inside the network: internal listener over SASL_SSL, and the Raft port's mutual TLS.
    files = _client_files(tmp_path, secure)
    docker = cluster.nodes[1].get_docker_client().client
    out = docker.containers.run(
        client_image,
        entrypoint=["python3", "-c", IN_NETWORK],
        network=cluster.network.name,
        environment={"ADMIN_PASSWORD": admin["sasl.password"]},
        volumes={files: {"bind": "/c", "mode": "ro"}},
        remove=True,
        labels={"org.testcontainers": "true"},
    ).decode()
    print(out)
    assert "brokers ['node1:9092', 'node2:9092', 'node3:9092']" in out, out
    assert "acked 100" in out, out
    assert "raft cluster-ca accepted" in out, out
    assert "raft other-ca refused" in out, out

    # What is stored: the admin's records only (bob's refused one is not), on every node.
    sts = cluster.wait_converged()
    for i, st in sts.items():
        assert st["partitions"]["secure/0"] == expected[0] + 100, (i, st["partitions"])
        for p in range(1, PARTITIONS):
            assert st["partitions"][f"secure/{p}"] == expected[p], (i, st["partitions"])
    print(f"checks took {time.monotonic() - t0:.1f} s after the cluster was ready")


def _try(f):
    try:
        return f()
    except Exception:
        return None
