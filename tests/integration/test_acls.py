"""ACLs end to end: one 3-node cluster of real node processes that requires SASL
(SCRAM-SHA-512) and checks ACLs (authorization on, as `raftsink serve` defaults),
with admin a super user and alice / bob plain users. Real clients: confluent-kafka's
AdminClient creates, describes and deletes ACLs; kafka-python's create_acls /
describe_acls; `raftsink acl`. A principal without WRITE producing gets
TOPIC_AUTHORIZATION_FAILED and nothing is written; without READ fetching,
TOPIC_AUTHORIZATION_FAILED; without DESCRIBE, Metadata hides the topic; a consumer
group needs READ on the group; the super user bypasses everything.

Every ACL change is written through the leader; before a client depends on it, the
test waits (with a deadline) until every node has applied it (`_on_every_node`): a
client may be connected to any node, and each decides from its own applied state."""

from __future__ import annotations

import asyncio
import contextvars
import time
import uuid

import pytest

from sink.kafka.admin import ADMIN_CONNECTION
from sink.kafka.admin_acls import describe_acls
from sink.process_cluster import SinkProcessCluster
from sink.security.acl import AclFilter, ResourceType
from sink.security.sasl_client import Login
from tests.helpers.sasl_tools import can_login, until

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as CkResourceType  # noqa: E402

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")
MECH = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    users = ",".join(f"{u}:{p}" for u, p in (ADMIN, ALICE, BOB))
    c = SinkProcessCluster(
        str(tmp_path_factory.mktemp("acls")),
        n=3,
        extra_args=[
            "--sasl-enabled",
            "--sasl-mechanisms",
            MECH,
            "--sasl-bootstrap-users",
            users,
            "--authorization-super-users",
            f"User:{ADMIN[0]}",
        ],
        authorization=True,
    )
    c.start()
    try:
        asyncio.run(c.wait_ready())
        for p in c.peers.values():  # the bootstrap users are applied on every node
            for who in (ADMIN, ALICE, BOB):
                login = Login(MECH, *who)
                until(lambda p=p, lg=login: asyncio.run(can_login(p.kafka, lg)), what=p.kafka)
        yield c
    finally:
        c.stop()


def _conf(cluster, user, **extra) -> dict:
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECH,
        "sasl.username": user[0],
        "sasl.password": user[1],
        **extra,
    }


def _admin(cluster, user=ADMIN) -> AdminClient:
    return AdminClient(_conf(cluster, user))


def _on_every_node(cluster, f: AclFilter, count: int) -> None:
    """Wait until every node's applied state has exactly count bindings matching f
    (asked of each node directly, as the super user)."""

    async def counts() -> list[int]:
        ADMIN_CONNECTION.set((None, Login(MECH, *ADMIN)))
        out = []
        for p in cluster.peers.values():
            host, port = p.kafka.rsplit(":", 1)
            # describe_acls asks the controller; ask each node itself instead.
            out.append(len(await describe_acls([(host, int(port))], f, at_node=True)))
        return out

    until(lambda: asyncio.run(counts()) == [count] * len(cluster.peers), what=f"{f} x{count}")


def _binding(topic: str, user, op, perm=AclPermissionType.ALLOW, rtype=CkResourceType.TOPIC):
    return AclBinding(rtype, topic, ResourcePatternType.LITERAL, f"User:{user[0]}", "*", op, perm)


def _create(cluster, bindings) -> None:
    admin = _admin(cluster)  # kept alive until its futures are done
    for fut in admin.create_acls(bindings, request_timeout=30).values():
        assert fut.result() is None


def _create_topic(cluster, topic: str) -> None:
    admin = _admin(cluster)
    admin.create_topics([ck.admin.NewTopic(topic, 1)])[topic].result(timeout=30)


def _high_watermark(cluster, topic: str) -> int:
    c = ck.Consumer(_conf(cluster, ADMIN, **{"group.id": "hw"}))
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=20)[1]
    finally:
        c.close()


def _produce(cluster, user, topic: str, n: int = 5, idempotent: bool = False) -> list:
    conf = {"acks": "all", "message.timeout.ms": 20000, "enable.idempotence": idempotent}
    p = ck.Producer(_conf(cluster, user, **conf))
    errors: list = []
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: errors.append(e))
    assert p.flush(60) == 0
    return errors


# ------------------------------------------------------------------------- tests


def test_confluent_admin_creates_describes_and_deletes_acls(cluster):
    topic = f"acl-admin-{uuid.uuid4().hex[:6]}"
    bindings = [
        _binding(topic, ALICE, AclOperation.READ),
        _binding(topic, ALICE, AclOperation.WRITE, AclPermissionType.DENY),
        AclBinding(
            CkResourceType.TOPIC,
            topic[:8],
            ResourcePatternType.PREFIXED,
            "User:bob",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        ),
    ]
    _create(cluster, bindings)
    admin = _admin(cluster)
    by_name = AclBindingFilter(
        CkResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = admin.describe_acls(by_name, request_timeout=30).result()
    assert sorted(found) == sorted(bindings[:2])
    # MATCH: every binding that applies to the topic, the prefixed one included.
    match = AclBindingFilter(
        CkResourceType.TOPIC,
        topic,
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert sorted(admin.describe_acls(match, request_timeout=30).result()) == sorted(bindings)
    # An invalid creation (a principal that is not TYPE:NAME) is refused on its own.
    bad = AclBinding(
        CkResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "nobody",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(ck.KafkaException):
        admin.create_acls([bad], request_timeout=30)[bad].result()
    deleted = admin.delete_acls([match], request_timeout=30)[match].result()
    assert sorted(deleted) == sorted(bindings)
    assert admin.describe_acls(match, request_timeout=30).result() == []
    # A user without ALTER on the cluster may not create ACLs.
    bob = _admin(cluster, BOB)
    with pytest.raises(ck.KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        bob.create_acls(bindings[:1], request_timeout=30)[bindings[0]].result()


def test_produce_without_write_writes_nothing(cluster):
    topic = f"acl-nowrite-{uuid.uuid4().hex[:6]}"
    _create_topic(cluster, topic)
    _create(cluster, [_binding(topic, ALICE, AclOperation.READ)])  # READ, not WRITE
    _on_every_node(cluster, AclFilter(ResourceType.TOPIC, topic), 1)
    errors = _produce(cluster, ALICE, topic)
    assert errors and all(
        e is not None and e.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors
    ), errors
    assert _high_watermark(cluster, topic) == 0  # nothing written
    # The super user bypasses the ACLs.
    assert _produce(cluster, ADMIN, topic) == [None] * 5
    assert _high_watermark(cluster, topic) == 5


def test_fetch_without_read_and_describe_hides_topics(cluster):
    topic = f"acl-noread-{uuid.uuid4().hex[:6]}"
    hidden = f"acl-hidden-{uuid.uuid4().hex[:6]}"
    for t in (topic, hidden):
        _create_topic(cluster, t)
    _create(cluster, [_binding(topic, ALICE, AclOperation.WRITE)])  # WRITE implies DESCRIBE
    _on_every_node(cluster, AclFilter(ResourceType.TOPIC, topic), 1)
    # Idempotent: InitProducerId is allowed by WRITE on a topic (no IDEMPOTENT_WRITE).
    assert _produce(cluster, ALICE, topic, 3, idempotent=True) == [None] * 3
    c = ck.Consumer(_conf(cluster, ALICE, **{"group.id": "unused", "enable.auto.commit": False}))
    try:
        # Metadata: only what alice may DESCRIBE; a named hidden topic is refused.
        listed = c.list_topics(timeout=20).topics
        assert topic in listed and hidden not in listed
        named = c.list_topics(hidden, timeout=20).topics[hidden]
        assert named.error is not None
        assert named.error.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        # Fetch without READ (librdkafka also looks the group up: GROUP_AUTHORIZATION_FAILED
        # for FindCoordinator, alice having no ACL on the group, comes along; skipped).
        c.assign([ck.TopicPartition(topic, 0, 0)])
        errors: list = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            e.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors
        ):
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                errors.append(m.error())
            assert m is None or m.error() is not None, "alice read a record without READ"
        codes = {e.code() for e in errors}
        assert ck.KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, errors
    finally:
        c.close()


def test_consumer_group_needs_group_read(cluster):
    topic = f"acl-group-{uuid.uuid4().hex[:6]}"
    _create_topic(cluster, topic)
    assert _produce(cluster, ADMIN, topic, 4) == [None] * 4
    group = f"g-{uuid.uuid4().hex[:6]}"
    _create(
        cluster,
        [
            _binding(topic, ALICE, AclOperation.READ),
            _binding(topic, BOB, AclOperation.READ),
            _binding(group, ALICE, AclOperation.READ, rtype=CkResourceType.GROUP),
        ],
    )
    _on_every_node(cluster, AclFilter(ResourceType.GROUP, group), 1)
    _on_every_node(cluster, AclFilter(ResourceType.TOPIC, topic), 2)

    def consume(user) -> tuple[list, object]:
        c = ck.Consumer(
            _conf(cluster, user, **{"group.id": group, "auto.offset.reset": "earliest"})
        )
        got, err = [], None
        c.subscribe([topic])
        deadline = time.monotonic() + 45
        try:
            while len(got) < 4 and err is None and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error() is not None:
                    if m.error().code() != ck.KafkaError._PARTITION_EOF:
                        err = m.error()
                else:
                    got.append(m.value())
        finally:
            c.close()
        return got, err

    got, err = consume(ALICE)
    assert err is None and len(got) == 4, (got, err)
    got, err = consume(BOB)  # READ on the topic, nothing on the group
    assert got == [] and err is not None
    assert err.code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED, err


def test_kafka_python_creates_and_describes_acls(cluster):
    kadmin = pytest.importorskip("kafka.admin")
    topic = f"acl-kp-{uuid.uuid4().hex[:6]}"
    client = kadmin.KafkaAdminClient(
        bootstrap_servers=cluster.bootstrap_servers.split(","),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=MECH,
        sasl_plain_username=ADMIN[0],
        sasl_plain_password=ADMIN[1],
    )
    try:
        pattern = kadmin.ResourcePattern(kadmin.ResourceType.TOPIC, topic)
        acl = kadmin.ACL(
            "User:alice",
            "*",
            kadmin.ACLOperation.READ,
            kadmin.ACLPermissionType.ALLOW,
            pattern,
        )
        result = client.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1, result
        flt = kadmin.ACLFilter(
            None,
            None,
            kadmin.ACLOperation.ANY,
            kadmin.ACLPermissionType.ANY,
            kadmin.ResourcePatternFilter(
                kadmin.ResourceType.TOPIC, topic, kadmin.ACLResourcePatternType.LITERAL
            ),
        )
        _on_every_node(cluster, AclFilter(ResourceType.TOPIC, topic), 1)
        acls, error = client.describe_acls(flt)
        assert error is kafka_no_error(), error
        assert [(a.principal, a.operation) for a in acls] == [
            ("User:alice", kadmin.ACLOperation.READ)
        ]
    finally:
        client.close()


def kafka_no_error():
    from kafka.errors import NoError

    return NoError


def test_raftsink_acl_cli(cluster, capsys, monkeypatch):
    """`raftsink acl` run in-process (sink.cli.main: the command's own code, without an
    interpreter start per call), each call in a fresh context (its connection is a
    context variable)."""
    from sink.cli import main

    topic = f"acl-cli-{uuid.uuid4().hex[:6]}"

    def cli(*args: str, user=ADMIN) -> tuple[int, str, str]:
        monkeypatch.setenv("RAFTSINK_SASL_PASSWORD", user[1])
        argv = ["acl", *args, "--bootstrap-servers", cluster.bootstrap_servers]
        code = contextvars.copy_context().run(main, [*argv, "--sasl-user", user[0]])
        out = capsys.readouterr()
        return code, out.out, out.err

    code, out, err = cli(
        "add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "READ",
        "--operation",
        "WRITE",
        "--topic",
        topic,
    )
    assert code == 0, err
    code, out, _ = cli("list", "--topic", topic)
    assert code == 0 and "operation=READ" in out and "operation=WRITE" in out, out
    code, out, err = cli("remove", "--topic", topic, "--operation", "WRITE")
    assert code == 0 and "removed 1 ACL(s)" in out, (out, err)
    _, out, _ = cli("list", "--topic", topic)
    assert "operation=WRITE" not in out and "operation=READ" in out, out
    # Usage errors are exit status 2; the cluster's refusals 1.
    assert cli("add", "--topic", topic)[0] == 2
    code, _, err = cli("list", user=BOB)  # no DESCRIBE on the cluster
    assert code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in err, err


def test_mutual_tls_principal_from_the_certificate(tmp_path_factory):
    """Without SASL, a client certificate names the principal: CN=writer is User:writer
    under the rule given (one node: the mapping is per connection, not per cluster)."""
    from tests.helpers.tls_certs import make_certs

    certs = make_certs(tmp_path_factory.mktemp("acl-certs"), names=("node1", "admin", "writer"))
    c = SinkProcessCluster(
        str(tmp_path_factory.mktemp("acl-mtls")),
        n=1,
        extra_args=[
            *certs.node_flags("node1", kafka=True, kafka_client_auth="required"),
            "--authorization-super-users",
            "User:admin",
            "--authorization-tls-principal-rules",
            "RULE:^CN=([^,]*)$/$1/,DEFAULT",
        ],
        authorization=True,
    )
    c.start()
    try:
        asyncio.run(c.wait_ready(120))

        def conf(name: str, **extra) -> dict:
            return {
                "bootstrap.servers": c.bootstrap_servers,
                "security.protocol": "ssl",
                "ssl.ca.location": certs.ca,
                "ssl.certificate.location": certs.cert(name),
                "ssl.key.location": certs.key(name),
                **extra,
            }

        topic, other = "mtls-allowed", "mtls-other"
        admin = AdminClient(conf("admin"))
        for t in (topic, other):
            admin.create_topics([ck.admin.NewTopic(t, 1)])[t].result(timeout=30)
        b = _binding(topic, ("writer",), AclOperation.WRITE)
        assert admin.create_acls([b], request_timeout=30)[b].result() is None

        def produce(t: str) -> list:
            p = ck.Producer(conf("writer", **{"acks": "all", "message.timeout.ms": 20000}))
            errors: list = []
            p.produce(t, b"v", on_delivery=lambda e, m: errors.append(e))
            assert p.flush(60) == 0
            return errors

        assert produce(topic) == [None]
        [err] = produce(other)
        assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    finally:
        c.stop()


def _kafka_python_admin(cluster, user):
    kadmin = pytest.importorskip("kafka.admin")
    return kadmin.KafkaAdminClient(
        bootstrap_servers=cluster.bootstrap_servers.split(","),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=MECH,
        sasl_plain_username=user[0],
        sasl_plain_password=user[1],
    )


def test_per_item_authorization_serves_the_allowed_items(cluster):
    """DeleteRecords, CreatePartitions, DescribeGroups, DeleteGroups, OffsetDelete and
    DescribeProducers answer per topic / group (as Kafka): the items alice may not
    touch get TOPIC_/GROUP_AUTHORIZATION_FAILED and stay as they were, the others are
    served. authorized_operations come back when asked (confluent-kafka)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import NewPartitions

    tag = uuid.uuid4().hex[:6]
    mine, other = f"acl-item-{tag}", f"acl-other-{tag}"
    g_mine, g_other = f"g-item-{tag}", f"g-other-{tag}"
    for t in (mine, other):
        _create_topic(cluster, t)
        assert _produce(cluster, ADMIN, t, 4) == [None] * 4
    for g in (g_mine, g_other):  # committed offsets make the groups exist
        c = ck.Consumer(_conf(cluster, ADMIN, **{"group.id": g, "enable.auto.commit": False}))
        try:
            tps = [ck.TopicPartition(t, 0, 2) for t in (mine, other)]
            assert all(tp.error is None for tp in c.commit(offsets=tps, asynchronous=False))
        finally:
            c.close()
    group = CkResourceType.GROUP
    _create(
        cluster,
        [
            *(_binding(mine, ALICE, op) for op in (AclOperation.DELETE, AclOperation.ALTER)),
            _binding(mine, ALICE, AclOperation.READ),
            _binding(other, ALICE, AclOperation.DESCRIBE),  # sees it, may do nothing else
            _binding(g_mine, ALICE, AclOperation.DELETE, rtype=group),
            # librdkafka names the CLUSTER resource type (4) BROKER
            _binding("kafka-cluster", ALICE, AclOperation.DESCRIBE, rtype=CkResourceType.BROKER),
        ],
    )
    _on_every_node(cluster, AclFilter(ResourceType.TOPIC, mine), 3)
    _on_every_node(cluster, AclFilter(ResourceType.TOPIC, other), 1)
    _on_every_node(cluster, AclFilter(ResourceType.GROUP, g_mine), 1)
    _on_every_node(cluster, AclFilter(ResourceType.CLUSTER, "kafka-cluster"), 1)
    admin, alice = _admin(cluster), _admin(cluster, ALICE)

    # authorized_operations: asked for, the bit set of what alice may do.
    [d_mine] = alice.describe_topics(
        TopicCollection([mine]), include_authorized_operations=True, request_timeout=30
    ).values()
    ops = set(d_mine.result().authorized_operations)
    assert ops == {
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.READ,
        AclOperation.DESCRIBE,
    }, ops
    described = alice.describe_consumer_groups(
        [g_mine, g_other], include_authorized_operations=True, request_timeout=30
    )
    g = described[g_mine].result()
    assert set(g.authorized_operations) == {AclOperation.DELETE, AclOperation.DESCRIBE}
    with pytest.raises(ck.KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        described[g_other].result()
    cl = alice.describe_cluster(include_authorized_operations=True, request_timeout=30).result()
    assert set(cl.authorized_operations) == {AclOperation.DESCRIBE}

    # DeleteRecords: mine moves, other is refused and keeps its records.
    res = alice.delete_records(
        [ck.TopicPartition(mine, 0, 2), ck.TopicPartition(other, 0, 2)], request_timeout=30
    )
    by_topic = {tp.topic: f for tp, f in res.items()}
    assert by_topic[mine].result().low_watermark == 2
    with pytest.raises(ck.KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        by_topic[other].result()
    low = ck.Consumer(_conf(cluster, ADMIN, **{"group.id": "lw"}))
    try:
        assert low.get_watermark_offsets(ck.TopicPartition(other, 0), timeout=20) == (0, 4)
    finally:
        low.close()

    # CreatePartitions: mine grows, other is refused and keeps one partition.
    res = alice.create_partitions([NewPartitions(mine, 2), NewPartitions(other, 2)])
    assert res[mine].result(timeout=30) is None
    with pytest.raises(ck.KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        res[other].result(timeout=30)

    def partitions(t: str) -> int:
        return len(admin.list_topics(t, timeout=20).topics[t].partitions)

    until(lambda: partitions(mine) == 2, what=f"{mine} grown")
    assert partitions(other) == 1

    kp = _kafka_python_admin(cluster, ALICE)
    try:
        from kafka import TopicPartition as KTP
        from kafka.errors import NoError, TopicAuthorizationFailedError

        # DescribeProducers: READ on mine, nothing on other.
        assert KTP(mine, 0) in kp.describe_producers([KTP(mine, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            kp.describe_producers([KTP(other, 0)])
        # OffsetDelete: DELETE on g_mine; READ on mine only -> other's offset stays.
        codes = kp.delete_group_offsets(g_mine, [KTP(mine, 0), KTP(other, 0)])
        assert codes == {KTP(mine, 0): NoError, KTP(other, 0): TopicAuthorizationFailedError}
    finally:
        kp.close()
    committed = ck.Consumer(_conf(cluster, ADMIN, **{"group.id": g_mine}))
    try:
        got = committed.committed([ck.TopicPartition(t, 0) for t in (mine, other)], timeout=20)
        assert {tp.topic: tp.offset for tp in got} == {mine: ck.OFFSET_INVALID, other: 2}
    finally:
        committed.close()

    # DeleteGroups: g_mine is deleted, g_other refused and kept.
    res = alice.delete_consumer_groups([g_mine, g_other], request_timeout=30)
    assert res[g_mine].result() is None
    with pytest.raises(ck.KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        res[g_other].result()
    listed = {g.group_id for g in admin.list_consumer_groups(request_timeout=30).result().valid}
    assert g_other in listed and g_mine not in listed
