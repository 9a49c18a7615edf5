"""Authorization in the handlers and the dispatch gate (sink.kafka.authorize) against a
real in-memory node: what a principal without the ACL gets, per API, and that a
denied Produce writes nothing."""

from __future__ import annotations

import asyncio

from kio.serial import entity_reader

from raftlog.entry import EntryType, LogEntry
from sink.kafka.authorize import gate
from sink.kafka.handlers import REGISTRY, Call
from sink.kafka.protocol import request_schema, response_schema
from sink.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from sink.security.acl_ops import create_op, encode_alter_acls
from sink.security.authorizer import Authorizer
from sink.security.authz_options import AuthorizationOptions
from tests.unit.sink.batches import make_batch
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import encode, request_values
from tests.unit.sink.test_handlers import produce_values

ALICE = "User:alice"


def _node(*bindings: AclBinding) -> MemoryNode:
    node = MemoryNode()
    node.fsm.on_apply(
        [LogEntry(1, 1, EntryType.DATA, encode_alter_acls([create_op(b) for b in bindings]))]
    )
    node.authorizer = Authorizer(  # type: ignore[attr-defined]
        lambda: node.fsm.acls, AuthorizationOptions(super_users="User:admin")
    )
    return node


def _allow(name: str, op: Operation, rtype=ResourceType.TOPIC, principal=ALICE) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, principal, "*", op, Permission.ALLOW)


def _call(node: MemoryNode, api_key: int, version: int, values=None, principal=ALICE):
    """Through the gate, then the handler, as the connection dispatches -> decoded body."""
    frame = encode(api_key, version, values or request_values(api_key), corr=9)
    cls = request_schema(api_key, version)
    _h, n = entity_reader(cls.__header_schema__)(frame, 0)
    req = entity_reader(cls)(frame, n)[0]
    ctx = node.context()
    c = Call(version, 9, req, frame, client_host="/10.0.0.1", principal=principal)

    async def run():
        denied = gate(ctx, api_key, c)
        if denied is not None:
            return REGISTRY[api_key].error_response(version, 9, req, denied)
        return await (await REGISTRY[api_key].handle(ctx, c))

    raw = asyncio.run(run())
    rcls = response_schema(api_key, version)
    _hdr, n = entity_reader(rcls.__header_schema__)(raw, 0)
    return entity_reader(rcls)(raw, n)[0]


def test_produce_without_write_proposes_nothing():
    node = _node(_allow("t", Operation.READ))
    r = _call(node, 0, 9, produce_values(make_batch([b"a"])))
    assert int(r.responses[0].partition_responses[0].error_code) == 29
    assert node.fsm.topic("t") is None  # not even auto-created
    node = _node(_allow("t", Operation.WRITE), _allow("t", Operation.CREATE))
    r = _call(node, 0, 9, produce_values(make_batch([b"a"])))
    assert int(r.responses[0].partition_responses[0].error_code) == 0
    assert node.fsm.high_watermark("t", 0) == 1
    # The super user needs no ACL.
    r = _call(_node(), 0, 9, produce_values(make_batch([b"a"])), principal="User:admin")
    assert int(r.responses[0].partition_responses[0].error_code) == 0


def test_metadata_hides_and_refuses_topics():
    node = _node(_allow("seen", Operation.WRITE))
    for t in ("seen", "hidden"):
        _call(
            node,
            3,
            12,
            {
                "topics": [{"name": t, "topic_id": None}],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
            principal="User:admin",
        )
    every = _call(
        node,
        3,
        12,
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    assert [t.name for t in every.topics] == ["seen"]
    named = _call(
        node,
        3,
        12,
        {
            "topics": [{"name": "hidden", "topic_id": None}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
    )
    assert int(named.topics[0].error_code) == 29
    # Unknown, describable but not creatable: UNKNOWN_TOPIC_OR_PARTITION, not created.
    node2 = _node(_allow("new", Operation.DESCRIBE))
    r = _call(
        node2,
        3,
        12,
        {
            "topics": [{"name": "new", "topic_id": None}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
    )
    assert int(r.topics[0].error_code) == 3 and node2.fsm.topic("new") is None


def test_gate_groups_cluster_and_init_producer_id():
    node = _node(_allow("t", Operation.WRITE))
    # JoinGroup without READ on the group.
    r = _call(node, 11, 5)
    assert int(r.error_code) == 30
    # DescribeCluster without DESCRIBE on the cluster.
    assert int(_call(node, 60, 1).error_code) == 31
    # InitProducerId: WRITE on some topic allows idempotence (KIP-679) ...
    ipi = {"transactional_id": None, "transaction_timeout": 60000}
    assert int(_call(node, 22, 4, ipi).error_code) == 0
    # ... nothing at all does not.
    assert int(_call(_node(), 22, 4, ipi).error_code) == 31
    # CreateAcls needs ALTER on the cluster.
    r = _call(node, 30, 3)
    assert {int(x.error_code) for x in r.results} == {31}


def test_every_api_is_authorized_somewhere():
    """A new API must be listed in authorize.GATES, check in its handler, or be open."""
    from sink.kafka import authorize

    covered = set(authorize.GATES) | authorize.CHECKED_IN_HANDLER | authorize.OPEN
    covered.add(22)  # InitProducerId: its own rule in gate()
    assert set(REGISTRY) - covered == set()


def test_describe_configs_answers_each_resource():
    node = _node(_allow("t", Operation.ALTER_CONFIGS))  # implies DESCRIBE_CONFIGS
    _call(node, 0, 9, produce_values(make_batch([b"a"])), principal="User:admin")
    r = _call(node, 32, 4)  # topic "t" and broker "1"
    assert [int(x.error_code) for x in r.results] == [0, 31]
    r = _call(_node(), 32, 4)
    assert [int(x.error_code) for x in r.results] == [29, 31]


def test_offsets_need_the_group_and_each_topic():
    group_read = _allow("g", Operation.READ, rtype=ResourceType.GROUP)  # implies DESCRIBE
    node = _node(group_read)
    _call(node, 0, 9, produce_values(make_batch([b"a"])), principal="User:admin")
    # OffsetCommit: the group allowed, topic "t" not (no READ): per partition.
    r = _call(node, 8, 8)
    assert int(r.topics[0].partitions[0].error_code) == 29
    # OffsetFetch v7 and v8: per topic; v8 per group too.
    r = _call(node, 9, 7)
    assert int(r.error_code) == 0
    assert {int(p.error_code) for p in r.topics[0].partitions} == {29}
    r = _call(node, 9, 8)
    assert int(r.groups[0].error_code) == 0
    assert int(r.groups[0].topics[0].partitions[0].error_code) == 29
    assert int(_call(_node(), 9, 8).groups[0].error_code) == 30
    # With READ on the topic the commit is written and fetched back.
    node = _node(group_read, _allow("t", Operation.READ))
    _call(node, 0, 9, produce_values(make_batch([b"a"])), principal="User:admin")
    assert int(_call(node, 8, 8).topics[0].partitions[0].error_code) == 0
    p = _call(node, 9, 8).groups[0].topics[0].partitions[0]
    assert (int(p.error_code), p.committed_offset) == (0, 5)


# ----------------------------------------------- per item: the others served, nothing
# done for a denied one (Kafka's filterByAuthorized)

ADMIN = "User:admin"


def _with_topics(*bindings: AclBinding, records: int = 3) -> MemoryNode:
    """A node with topics "t" and "u" (auto-created by the super user's Produce), each
    holding `records` records in partition 0."""
    node = _node(*bindings)
    for topic in ("t", "u"):
        batch = make_batch([b"r"] * records)
        r = _call(node, 0, 9, produce_values(batch, topic=topic), principal=ADMIN)
        assert int(r.responses[0].partition_responses[0].error_code) == 0
    return node


def _commit(node: MemoryNode, group: str, topics=("t", "u"), offset: int = 2) -> None:
    values = request_values(8) | {
        "group_id": group,
        "topics": [
            {
                "name": t,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "commit_timestamp": -1,
                        "committed_metadata": "",
                    }
                ],
            }
            for t in topics
        ],
    }
    r = _call(node, 8, 8, values, principal=ADMIN)
    assert {int(p.error_code) for t in r.topics for p in t.partitions} == {0}


def test_delete_records_refuses_only_the_denied_topic():
    node = _with_topics(_allow("t", Operation.DELETE))
    values = {
        "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "offset": 2}]}
            for name in ("t", "u")
        ],
        "timeout": 1000,
    }
    r = _call(node, 21, 2, values)
    got = {
        t.name: (int(t.partitions[0].error_code), t.partitions[0].low_watermark) for t in r.topics
    }
    assert got == {"t": (0, 2), "u": (29, -1)}
    assert node.fsm.log_start_offset("t", 0) == 2
    assert node.fsm.log_start_offset("u", 0) == 0  # the denied topic: nothing moved


def test_create_partitions_grows_only_the_allowed_topic():
    node = _with_topics(_allow("t", Operation.ALTER))
    values = {
        "topics": [{"name": n, "count": 3, "assignments": None} for n in ("t", "u")],
        "timeout": 1000,
        "validate_only": False,
    }
    r = _call(node, 37, 3, values)
    assert {x.name: int(x.error_code) for x in r.results} == {"t": 0, "u": 29}
    assert node.fsm.topic("t").partitions == 3
    assert node.fsm.topic("u").partitions == 1  # the denied topic: not grown
    # A duplicate stays INVALID_REQUEST (checked first, as Kafka).
    dup = values | {"topics": [{"name": "u", "count": 4, "assignments": None}] * 2}
    assert {int(x.error_code) for x in _call(node, 37, 3, dup).results} >= {42}


def test_describe_producers_per_topic():
    node = _with_topics(_allow("t", Operation.READ))
    r = _call(node, 61, 0, {"topics": [{"name": n, "partition_indexes": [0]} for n in "tu"]})
    got = {t.name: int(t.partitions[0].error_code) for t in r.topics}
    assert got == {"t": 0, "u": 29}


def test_delete_groups_deletes_only_the_allowed_group():
    node = _with_topics(_allow("g", Operation.DELETE, rtype=ResourceType.GROUP))
    for g in ("g", "h"):
        _commit(node, g)
    r = _call(node, 42, 2, {"groups_names": ["h", "g"]})
    assert [(x.group_id, int(x.error_code)) for x in r.results] == [("h", 30), ("g", 0)]
    assert not node.fsm.group_offsets.has_group("g")
    assert node.fsm.group_offsets.get("h", "t", 0).offset == 2  # denied: kept


def test_offset_delete_keeps_the_denied_topics_offsets():
    group_delete = _allow("g", Operation.DELETE, rtype=ResourceType.GROUP)
    node = _with_topics(group_delete, _allow("t", Operation.READ))
    _commit(node, "g")
    values = {
        "group_id": "g",
        "topics": [{"name": n, "partitions": [{"partition_index": 0}]} for n in ("t", "u")],
    }
    r = _call(node, 47, 0, values)
    assert int(r.error_code) == 0
    got = {t.name: int(t.partitions[0].error_code) for t in r.topics}
    assert got == {"t": 0, "u": 29}
    assert node.fsm.group_offsets.get("g", "t", 0) is None
    assert node.fsm.group_offsets.get("g", "u", 0).offset == 2  # denied: kept
    # Without DELETE on the group the whole request is refused (Kafka's too).
    node = _with_topics(_allow("t", Operation.READ))
    _commit(node, "g")
    r = _call(node, 47, 0, values)
    assert int(r.error_code) == 30 and r.topics == ()
    assert node.fsm.group_offsets.get("g", "t", 0).offset == 2


def test_describe_groups_per_group_with_authorized_operations():
    node = _node(_allow("g", Operation.READ, rtype=ResourceType.GROUP))
    asked = {"groups": ["g", "h"], "include_authorized_operations": True}
    r = _call(node, 15, 5, asked)
    got = {g.group_id: (int(g.error_code), g.authorized_operations) for g in r.groups}
    # READ implies DESCRIBE: bits 3 and 8; h refused, INT32_MIN.
    assert got == {"g": (0, (1 << 3) | (1 << 8)), "h": (30, -(2**31))}
    r = _call(node, 15, 5, asked | {"include_authorized_operations": False})
    assert {g.authorized_operations for g in r.groups} == {-(2**31)}


def test_metadata_and_describe_cluster_authorized_operations():
    node = _with_topics(
        _allow("t", Operation.WRITE),
        _allow("kafka-cluster", Operation.DESCRIBE, rtype=ResourceType.CLUSTER),
    )
    values = {
        "topics": [{"name": n, "topic_id": None} for n in ("t", "u")],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": True,
        "include_topic_authorized_operations": True,
    }
    for version in (8, 10, 12):
        r = _call(node, 3, version, values)
        got = {t.name: (int(t.error_code), t.topic_authorized_operations) for t in r.topics}
        # WRITE implies DESCRIBE (bits 4 and 8); u is refused: INT32_MIN.
        assert got == {"t": (0, (1 << 4) | (1 << 8)), "u": (29, -(2**31))}, version
        if version <= 10:
            assert r.cluster_authorized_operations == 1 << 8
    r = _call(node, 3, 12, values | {"include_topic_authorized_operations": False})
    assert {t.topic_authorized_operations for t in r.topics} == {-(2**31)}
    # The super user: every operation Kafka lists for a topic / the cluster.
    r = _call(node, 3, 10, values, principal=ADMIN)
    topic_ops = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    assert {t.topic_authorized_operations for t in r.topics} == {topic_ops}
    assert r.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    # DescribeCluster: asked for -> the bit set, else INT32_MIN.
    dc = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
    assert _call(node, 60, 1, dc).cluster_authorized_operations == 1 << 8
    dc["include_cluster_authorized_operations"] = False
    assert _call(node, 60, 1, dc).cluster_authorized_operations == -(2**31)


def test_offset_for_leader_epoch_refuses_only_the_denied_topic():
    """Per topic, as Kafka: DESCRIBE on "t" lets its partitions be answered while "u"'s
    get TOPIC_AUTHORIZATION_FAILED (the whole request used to be refused)."""
    node = _with_topics(_allow("t", Operation.DESCRIBE))
    values = {
        "replica_id": -1,
        "topics": [
            {
                "topic": name,
                "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 1}],
            }
            for name in ("t", "u")
        ],
    }
    r = _call(node, 23, 4, values)
    got = {t.topic: int(t.partitions[0].error_code) for t in r.topics}
    assert got["u"] == 29
    t = next(x for x in r.topics if x.topic == "t").partitions[0]
    assert (got["t"], t.end_offset) == (0, 3), (got, t)


def test_describe_transactions_per_id_and_the_cluster_gates_of_the_quorum_apis():
    node = _node(_allow("tx-a", Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID))
    r = _call(node, 65, 0)
    got = {s.transactional_id: int(s.error_code) for s in r.transaction_states}
    assert got == {"tx-a": 105, "tx-b": 53}  # NOT_FOUND; TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # DescribeQuorum needs DESCRIBE and ElectLeaders ALTER on the cluster.
    assert int(_call(node, 55, 2).error_code) == 31  # CLUSTER_AUTHORIZATION_FAILED
    assert int(_call(node, 43, 2).error_code) == 31
    admin = _node(_allow("kafka-cluster", Operation.DESCRIBE, ResourceType.CLUSTER))
    assert int(_call(admin, 55, 2).error_code) == 0


def _with_relayed(node: MemoryNode):
    """node's context running envelopes' inner requests as sink.kafka.server does."""
    ctx = node.context()

    async def relayed(api_key, call):
        api = REGISTRY[api_key]
        denied = gate(ctx, api_key, call)
        if denied is not None:
            return api.error_response(call.version, call.corr, call.req, denied)
        return await (await api.handle(ctx, call))

    ctx.relayed = relayed
    node.context = lambda limits=None: ctx  # type: ignore[method-assign]
    return node


def test_an_envelope_runs_its_request_as_the_client_it_names():
    """The relay user (a super user here) sends envelopes; the inner request is
    authorized as the principal inside: alice may not DESCRIBE the cluster, admin may.
    alice herself may not send an envelope (CLUSTER_ACTION), and only relayed APIs are
    opened (a Produce inside: INVALID_REQUEST, no data)."""
    node = _with_relayed(_node())
    inner = encode(55, 2, request_values(55), corr=77)
    quorum = response_schema(55, 2)

    def send(principal: str, sender: str = "User:admin", frame: bytes = inner):
        values = {
            "request_data": frame,
            "request_principal": principal.encode(),
            "client_host_address": bytes([10, 0, 0, 7]),
        }
        return _call(node, 58, 0, values, principal=sender)

    def inner_answer(r) -> tuple[int, int]:
        data = bytes(r.response_data)
        hdr, n = entity_reader(quorum.__header_schema__)(data, 0)
        return hdr.correlation_id, int(entity_reader(quorum)(data, n)[0].error_code)

    assert int(send("User:alice").error_code) == 0
    assert inner_answer(send("User:alice")) == (77, 31)  # CLUSTER_AUTHORIZATION_FAILED
    assert inner_answer(send("User:admin")) == (77, 0)
    assert int(send("User:admin", sender=ALICE).error_code) == 31  # no CLUSTER_ACTION
    r = send("User:admin", frame=encode(0, 9, produce_values(make_batch([b"v"])), corr=5))
    assert int(r.error_code) == 42 and r.response_data is None  # INVALID_REQUEST
    # Broken inner frames: truncated anywhere, a length claiming more than is there.
    for cut in (0, 4, 9, len(inner) - 1):
        r = send("User:admin", frame=inner[:cut])
        assert int(r.error_code) == 42 and r.response_data is None, cut
    r = send("User:admin", frame=inner[:-2] + b"\x7f\xff")
    assert int(r.error_code) in (0, 42)  # never an exception, never a crash


def test_envelope_wrap_and_unwrap():
    """The relay's side: the client's frame and principal go in; the inner answer comes
    out, and a refused envelope is an EnvelopeError (the relay then answers itself)."""
    import pytest

    from sink.kafka.handlers.envelope import EnvelopeError, unwrap, wrap
    from sink.kafka.protocol.build import encode_response

    inner = encode(55, 2, request_values(55), corr=77)
    c = Call(2, 77, None, inner, client_host="/10.0.0.7", principal="User:bob")
    frame = wrap(c)
    cls = request_schema(58, 0)
    _hdr, n = entity_reader(cls.__header_schema__)(frame, 0)
    env = entity_reader(cls)(frame, n)[0]
    assert (bytes(env.request_data), env.request_principal) == (inner, b"User:bob")
    assert bytes(env.client_host_address) == bytes([10, 0, 0, 7])
    assert unwrap(encode_response(58, 0, 77, {"response_data": b"in", "error_code": 0})) == b"in"
    with pytest.raises(EnvelopeError):
        unwrap(encode_response(58, 0, 77, {"response_data": None, "error_code": 42}))
