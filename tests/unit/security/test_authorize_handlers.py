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
