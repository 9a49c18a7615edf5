"""SASL end to end (SASL_PLAINTEXT): real node processes that require SASL, real
clients (confluent-kafka, kafka-python, aiokafka, kcat, KafkaJS) with SCRAM-SHA-512 and
PLAIN: produce, idempotent produce, consume. Users come from the bootstrap setting and
from `raftsink users` (through the log: every node authenticates them). Each failure
(wrong password, unknown user, a disabled mechanism, a request before authentication)
is a clear error, crashes nothing, and writes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from sink.kafka.admin import AdminError
from sink.kafka.admin_users import describe_users
from sink.process_cluster import SinkProcessCluster
from sink.security.sasl_client import Login
from tests.helpers.client_tools import kafkajs_script, kcat_path
from tests.helpers.kafka_wire import encode_request, recv_exact
from tests.helpers.sasl_tools import can_login, until

ck = pytest.importorskip("confluent_kafka")

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
N = 20
MECHS = ["SCRAM-SHA-512", "PLAIN"]
# SCRAM-SHA-256 is left out of the cluster's mechanisms: the "disabled mechanism" case.
ENABLED = "SCRAM-SHA-512,PLAIN"


def _raftsink_users(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sink.cli", "users", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    c = SinkProcessCluster(
        str(tmp_path_factory.mktemp("sasl3")),
        n=3,
        extra_args=[
            "--sasl-enabled",
            "--sasl-mechanisms",
            ENABLED,
            "--sasl-bootstrap-users",
            f"{ADMIN[0]}:{ADMIN[1]}",
        ],
    )
    c.start()
    try:
        asyncio.run(c.wait_ready())
        admin = Login("SCRAM-SHA-512", *ADMIN)
        for p in c.peers.values():  # the bootstrap user is applied on every node
            until(lambda p=p: asyncio.run(can_login(p.kafka, admin)), what=f"admin on {p.kafka}")
        yield c
    finally:
        c.stop()


def _users_cli(cluster, *args: str, password: str | None = None) -> subprocess.CompletedProcess:
    env = {"RAFTSINK_SASL_PASSWORD": ADMIN[1]}
    if password is not None:
        env["RAFTSINK_USER_PASSWORD"] = password
    return _raftsink_users(
        *args, "--bootstrap-servers", cluster.bootstrap_servers, "--sasl-user", ADMIN[0], env=env
    )


@pytest.fixture(scope="module")
def alice(secure):
    """A user made with `raftsink users create` (through the log), usable on every node."""
    out = _users_cli(secure, "create", ALICE[0], password=ALICE[1])
    assert out.returncode == 0, out
    login = Login("SCRAM-SHA-512", *ALICE)
    for p in secure.peers.values():
        until(lambda p=p: asyncio.run(can_login(p.kafka, login)), what=f"alice on {p.kafka}")
    return ALICE


def _conf(cluster, mech: str, user=ALICE, **extra) -> dict:
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mech,
        "sasl.username": user[0],
        "sasl.password": user[1],
        **extra,
    }


def _values(topic: str) -> list[bytes]:
    return [f"{topic}-v{i}".encode() for i in range(N)]


def _consume_confluent(cluster, topic: str, mech: str = "SCRAM-SHA-512") -> list[bytes]:
    c = ck.Consumer(
        _conf(
            cluster,
            mech,
            **{"group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"},
        )
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def _high_watermark(cluster, topic: str) -> int:
    """Records in partition 0 of topic, asked as the admin (-1: no such topic)."""
    c = ck.Consumer(_conf(cluster, "SCRAM-SHA-512", ADMIN, **{"group.id": "hw"}))
    try:
        md = c.list_topics(topic, timeout=20)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return -1
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=20)[1]
    finally:
        c.close()


# ------------------------------------------------------------------- the clients


@pytest.mark.parametrize("mech", MECHS)
@pytest.mark.parametrize("idempotent", [False, True])
def test_confluent_kafka(secure, alice, mech, idempotent):
    topic = f"ck-{mech.lower()}-{int(idempotent)}"
    p = ck.Producer(_conf(secure, mech, **{"enable.idempotence": idempotent, "acks": "all"}))
    errors = []
    for v in _values(topic):
        p.produce(topic, v, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(60) == 0 and errors == [None] * N, errors
    assert sorted(_consume_confluent(secure, topic, mech)) == sorted(_values(topic))


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python(secure, alice, mech):
    kp = pytest.importorskip("kafka")
    topic = f"kp-{mech.lower()}"
    common = {
        "bootstrap_servers": secure.bootstrap_servers.split(","),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mech,
        "sasl_plain_username": ALICE[0],
        "sasl_plain_password": ALICE[1],
    }
    prod = kp.KafkaProducer(acks="all", enable_idempotence=True, **common)
    for v in _values(topic):
        prod.send(topic, v).get(timeout=60)
    prod.close()
    cons = kp.KafkaConsumer(
        topic, group_id=f"g-{uuid.uuid4().hex[:8]}", auto_offset_reset="earliest", **common
    )
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < N and time.monotonic() < deadline:
        for recs in cons.poll(timeout_ms=500).values():
            got += [r.value for r in recs]
    cons.close()
    assert sorted(got) == sorted(_values(topic))


@pytest.mark.parametrize("mech", MECHS)
def test_aiokafka(secure, alice, mech):
    aiokafka = pytest.importorskip("aiokafka")
    topic = f"aio-{mech.lower()}"
    common = {
        "bootstrap_servers": secure.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mech,
        "sasl_plain_username": ALICE[0],
        "sasl_plain_password": ALICE[1],
    }

    async def run() -> list[bytes]:
        prod = aiokafka.AIOKafkaProducer(enable_idempotence=True, **common)
        await prod.start()
        try:
            for v in _values(topic):
                await prod.send_and_wait(topic, v)
        finally:
            await prod.stop()
        cons = aiokafka.AIOKafkaConsumer(
            topic, group_id=f"g-{uuid.uuid4().hex[:8]}", auto_offset_reset="earliest", **common
        )
        await cons.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(60):
                while len(got) < N:
                    for recs in (await cons.getmany(timeout_ms=500)).values():
                        got += [r.value for r in recs]
        finally:
            await cons.stop()
        return got

    async def bounded() -> list[bytes]:  # a stuck client fails the test, not the session
        async with asyncio.timeout(150):
            return await run()

    assert sorted(asyncio.run(bounded())) == sorted(_values(topic))


def _kcat_args(cluster, mech: str, user=ALICE) -> list[str]:
    return [
        kcat_path(),
        "-b",
        cluster.bootstrap_servers,
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        f"sasl.mechanisms={mech}",
        "-X",
        f"sasl.username={user[0]}",
        "-X",
        f"sasl.password={user[1]}",
    ]


@pytest.mark.parametrize("mech", MECHS)
def test_kcat(secure, alice, mech):
    topic = f"kcat-{mech.lower()}"
    lines = [v.decode() for v in _values(topic)]
    base = _kcat_args(secure, mech)
    out = subprocess.run(
        [*base, "-P", "-t", topic, "-X", "enable.idempotence=true"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        [*base, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(lines)


@pytest.mark.parametrize("mech", MECHS)
def test_kafkajs(secure, alice, mech):
    node, script = kafkajs_script()
    topic = f"kjs-{mech.lower()}"
    sasl = {"mechanism": mech.lower(), "username": ALICE[0], "password": ALICE[1]}
    env = {**os.environ, "KAFKAJS_SASL": json.dumps(sasl)}
    results = {}
    for op in ("idempotent", "consume"):
        out = subprocess.run(
            [node, script, secure.bootstrap_servers, op, topic, str(N)],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
        )
        results[op] = json.loads(out.stdout.strip().splitlines()[-1])
        assert results[op]["ok"], results[op]
    assert len(results["consume"]["records"]) == N, results["consume"]


# ------------------------------------------------------------------ the failures


@pytest.mark.parametrize(
    "mech, user, expect",
    [
        ("SCRAM-SHA-512", (ALICE[0], "wrong"), "invalid credentials"),
        ("PLAIN", (ALICE[0], "wrong"), "invalid credentials"),
        ("SCRAM-SHA-512", ("nobody", "x"), "invalid credentials"),
        ("SCRAM-SHA-256", ALICE, "SCRAM-SHA-256"),  # disabled on this cluster
    ],
)
def test_refused_logins_are_clear_errors_and_write_nothing(secure, alice, mech, user, expect):
    topic = f"refused-{uuid.uuid4().hex[:8]}"
    errors: list[str] = []
    p = ck.Producer(
        _conf(
            secure,
            mech,
            user,
            **{"message.timeout.ms": 3000, "error_cb": lambda e: errors.append(str(e))},
        )
    )
    delivered = []
    p.produce(topic, b"never", on_delivery=lambda e, m: delivered.append(e))
    p.flush(10)
    assert delivered and delivered[0] is not None, delivered  # not delivered
    assert any(expect in e for e in errors), errors
    assert _high_watermark(secure, topic) in (-1, 0)  # nothing written, not even the topic
    assert secure.exited() == {}  # no node crashed


def test_wire_level_refusals(secure, alice):
    """A request before authentication, SaslAuthenticate before SaslHandshake, a wrong
    password over the wire: each closes the connection (as Kafka does) after answering
    what can be answered; an unknown or disabled mechanism names the enabled ones."""
    host, port = secure.peers[1].kafka.rsplit(":", 1)
    topic = f"wire-{uuid.uuid4().hex[:8]}"

    def closed_after(frames: list[bytes]) -> bytes:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            for f in frames:
                s.sendall(f)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return data

    produce = encode_request(
        0,
        9,
        1,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": None}]}],
        },
    )
    metadata = encode_request(
        3,
        12,
        1,
        {
            "topics": [{"name": topic, "topic_id": None}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
    )
    assert closed_after([metadata]) == b""  # closed, nothing answered
    assert closed_after([produce]) == b""
    assert closed_after([encode_request(36, 2, 1, {"auth_bytes": b"\0alice\0alice-secret"})]) == b""
    # A disabled mechanism: answered (UNSUPPORTED_SASL_MECHANISM, 33, the list), then closed.
    data = closed_after([encode_request(17, 1, 1, {"mechanism": "SCRAM-SHA-256"})])
    assert len(data) > 8 and data[8:10] == (33).to_bytes(2, "big")
    assert b"SCRAM-SHA-512" in data and b"PLAIN" in data
    # ApiVersions is answered before authentication.
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            encode_request(18, 3, 5, {"client_software_name": "t", "client_software_version": "1"})
        )
        size = int.from_bytes(recv_exact(s, 4), "big")
        assert size > 0 and recv_exact(s, size)[:4] == (5).to_bytes(4, "big")
    assert _high_watermark(secure, topic) == -1  # Metadata's auto-creation never ran
    assert secure.exited() == {}


def test_users_cli_list_alter_delete(secure, alice):
    out = _users_cli(secure, "list")
    assert out.returncode == 0 and "alice: SCRAM-SHA-256" in out.stdout, out
    assert "admin: SCRAM-SHA-256" in out.stdout
    assert _users_cli(secure, "create", "alice", password="x").returncode == 1  # exists
    bob = ("bob", "bob-secret")
    assert (
        _users_cli(
            secure, "create", "bob", "--mechanism", "SCRAM-SHA-512", password=bob[1]
        ).returncode
        == 0
    )
    new = Login("SCRAM-SHA-512", "bob", "bob-changed")
    assert _users_cli(secure, "alter", "bob", password=new.password).returncode == 0
    for p in secure.peers.values():
        until(
            lambda p=p: asyncio.run(can_login(p.kafka, new)),
            what=f"bob's new password on {p.kafka}",
        )
        assert not asyncio.run(can_login(p.kafka, Login("SCRAM-SHA-512", *bob)))
    out = _users_cli(secure, "delete", "bob")
    assert out.returncode == 0, out
    for p in secure.peers.values():
        until(lambda p=p: not asyncio.run(can_login(p.kafka, new)), what=f"bob gone on {p.kafka}")
    # No login: the cluster closes the admin connection; the CLI says so.
    out = _raftsink_users("list", "--bootstrap-servers", secure.bootstrap_servers)
    assert out.returncode == 1 and "raftsink users:" in out.stderr, out
    # Wrong admin password: refused, clearly.
    out = _raftsink_users(
        "list",
        "--bootstrap-servers",
        secure.bootstrap_servers,
        "--sasl-user",
        "admin",
        env={"RAFTSINK_SASL_PASSWORD": "nope"},
    )
    assert out.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in out.stderr, out
    with pytest.raises(AdminError):
        asyncio.run(
            describe_users(
                [
                    (h, int(pt))
                    for h, pt in (a.rsplit(":", 1) for a in secure.bootstrap_servers.split(","))
                ]
            )
        )


# ------------------------------------------- SaslHandshake v0 and KIP-368 sessions


@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory):
    """One node whose sessions last 2 s (sasl.session_lifetime_ms)."""
    c = SinkProcessCluster(
        str(tmp_path_factory.mktemp("sasl1")),
        n=1,
        extra_args=[
            "--sasl-enabled",
            "--sasl-session-lifetime-ms",
            "2000",
            "--sasl-bootstrap-users",
            f"{ADMIN[0]}:{ADMIN[1]}",
        ],
    )
    c.start()
    try:
        asyncio.run(c.wait_ready())
        admin = Login("SCRAM-SHA-512", *ADMIN)
        until(lambda: asyncio.run(can_login(c.peers[1].kafka, admin)), what="admin")
        yield c
    finally:
        c.stop()


def _metadata_frame(corr: int) -> bytes:
    return encode_request(
        3,
        12,
        corr,
        {
            "topics": [],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )


def _answer(s: socket.socket) -> bytes:
    return recv_exact(s, int.from_bytes(recv_exact(s, 4), "big"))


def test_v0_handshake_then_raw_tokens(short_sessions):
    """SaslHandshake v0: the next frame is a raw PLAIN token (no header), answered with
    an empty raw token, as Kafka does; then requests are served. A bad raw token closes."""
    host, port = short_sessions.peers[1].kafka.rsplit(":", 1)
    token = f"\0{ADMIN[0]}\0{ADMIN[1]}".encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(17, 0, 1, {"mechanism": "PLAIN"}))
        assert _answer(s)[4:6] == b"\0\0"  # correlation id, then error_code 0
        s.sendall(len(token).to_bytes(4, "big") + token)
        assert recv_exact(s, 4) == b"\0\0\0\0"  # the empty raw challenge: authenticated
        s.sendall(_metadata_frame(2))
        assert _answer(s)[:4] == (2).to_bytes(4, "big")
    bad = b"\0admin\0wrong"
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(17, 0, 1, {"mechanism": "PLAIN"}))
        _answer(s)
        s.sendall(len(bad).to_bytes(4, "big") + bad)
        assert s.recv(16) == b""  # closed, no answer
    assert short_sessions.exited() == {}


def test_expired_session_is_closed_unless_reauthenticated(short_sessions):
    """KIP-368: SaslAuthenticate v2 tells the lifetime; once it has passed, a request
    closes the connection, and a re-authentication (same user) keeps it open."""
    host, port = short_sessions.peers[1].kafka.rsplit(":", 1)

    def authenticate(s: socket.socket, corr: int) -> int:
        s.sendall(encode_request(17, 1, corr, {"mechanism": "PLAIN"}))
        assert _answer(s)[4:6] == b"\0\0"
        s.sendall(
            encode_request(36, 2, corr + 1, {"auth_bytes": f"\0{ADMIN[0]}\0{ADMIN[1]}".encode()})
        )
        body = _answer(s)
        assert body[5:7] == b"\0\0", body  # flexible header: corr, tag byte, error_code
        return int.from_bytes(body[-9:-1], "big")  # session_lifetime_ms, before the tags

    with socket.create_connection((host, int(port)), timeout=10) as s:
        assert authenticate(s, 1) == 2000
        started = time.monotonic()
        s.sendall(_metadata_frame(3))
        assert _answer(s)[:4] == (3).to_bytes(4, "big")
        time.sleep(max(0.0, 2.3 - (time.monotonic() - started)))  # past the lifetime
        assert authenticate(s, 4) == 2000  # re-authentication keeps the connection
        s.sendall(_metadata_frame(6))
        assert _answer(s)[:4] == (6).to_bytes(4, "big")
        time.sleep(2.3)  # past the new lifetime, no re-authentication
        s.sendall(_metadata_frame(7))
        assert s.recv(16) == b""  # closed
    assert "SASL session expired" in short_sessions.log_tail(1)


def test_confluent_kafka_reauthenticates(short_sessions):
    """librdkafka re-authenticates before the 2 s lifetime ends: a producer that runs for
    three lifetimes delivers everything."""
    p = ck.Producer(
        {
            "bootstrap.servers": short_sessions.bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": ADMIN[0],
            "sasl.password": ADMIN[1],
            "enable.idempotence": True,
        }
    )
    errors: list = []
    end = time.monotonic() + 6.0
    sent = 0
    while time.monotonic() < end:  # load over several lifetimes (pacing, not waiting)
        p.produce("reauth", f"r{sent}".encode(), on_delivery=lambda e, m: errors.append(e))
        sent += 1
        p.poll(0.1)
    assert p.flush(30) == 0
    assert len(errors) == sent and set(errors) == {None}, errors[:3]
    # It re-authenticated: the node never had to close one of its connections as expired.
    expired = [
        line
        for line in short_sessions.log_tail(1, 200_000).splitlines()
        if "session expired" in line and "rdkafka" in line
    ]
    assert expired == [], expired
