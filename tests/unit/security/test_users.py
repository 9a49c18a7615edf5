"""SASL users through the log: the ALTER_USERS entry applied by the state machine (and
kept in its snapshot), the bootstrap users written once, and the SASL and SCRAM
credential handlers against an in-memory node."""

from __future__ import annotations

import asyncio
import zlib

import pytest
from kio.schema.errors import ErrorCode

from sink.kafka.handlers import REGISTRY, Call
from sink.security.sasl import SaslPolicy, SaslSession
from sink.security.scram import credential_from_salted, make_credential, salted_password
from sink.security.user_ops import delete_op, upsert_op
from sink.security.user_service import UserService
from sink.state import SinkStateMachine
from sink.state.users import UserTable, encode_alter_users
from tests.unit.sink.memory_services import MemoryNode
from tests.unit.sink.requests import encode
from tests.unit.sink.test_handlers import call

M512, M256 = "SCRAM-SHA-512", "SCRAM-SHA-256"


def node_with_users(bootstrap=()) -> MemoryNode:
    node = MemoryNode()
    node.users = UserService(  # type: ignore[attr-defined]
        lambda: node.fsm.users,
        node._apply_entry,
        is_leader=node.is_leader,
        leader_ready=node.leader_ready,
        bootstrap=list(bootstrap),
        iterations=4096,
    )
    return node


def test_apply_upsert_delete_and_per_op_errors():
    t = UserTable()
    cred = make_credential(M512, "pw", 4096)
    got = t.apply(
        encode_alter_users(
            [
                upsert_op("alice", M512, cred),
                delete_op("bob", M512),
                {"op": "upsert", "user": "carol", "mechanism": "MD5"},
                upsert_op("dave", M512, cred) | {"iterations": 100},
                {"op": "rename", "user": "alice", "mechanism": M512},
                {"op": "upsert", "user": "", "mechanism": M512},
            ]
        )
    )
    assert [(u, int(c)) for u, c, _ in got] == [
        ("alice", 0),
        ("bob", ErrorCode.resource_not_found),
        ("carol", ErrorCode.unsupported_sasl_mechanism),
        ("dave", ErrorCode.unacceptable_credential),
        ("alice", ErrorCode.invalid_request),
        ("", ErrorCode.unacceptable_credential),
    ]
    assert t.credential("alice", M512) == cred and t.describe() == [("alice", [(M512, 4096)])]
    assert t.apply(encode_alter_users([delete_op("alice", M512)]))[0][1] == ErrorCode.none
    assert t.describe() == []


def test_bootstrap_applies_once_per_user_and_mechanism():
    t = UserTable()
    first = make_credential(M512, "first", 4096)
    t.apply(encode_alter_users([upsert_op("admin", M512, first, bootstrap=True)]))
    changed = make_credential(M512, "changed", 4096)
    t.apply(encode_alter_users([upsert_op("admin", M512, changed)]))
    again = make_credential(M512, "first", 4096)
    t.apply(encode_alter_users([upsert_op("admin", M512, again, bootstrap=True)]))
    assert t.credential("admin", M512) == changed  # the operator's change sticks
    t.apply(encode_alter_users([delete_op("admin", M512)]))
    t.apply(encode_alter_users([upsert_op("admin", M512, again, bootstrap=True)]))
    assert t.credential("admin", M512) is None  # ... and so does a deletion


def test_state_machine_applies_users_keeps_them_in_snapshots_and_skips_garbage():
    fsm = SinkStateMachine()
    node = MemoryNode()
    node.fsm = fsm
    cred = make_credential(M256, "plain-password-never-stored", 4096)
    node.apply(encode_alter_users([upsert_op("alice", M256, cred, bootstrap=True)]))
    assert node.apply(b"S{not json") is None  # logged and skipped, never a crash
    assert node.apply(b'S{"ops": 3}') is None
    other = SinkStateMachine()
    other.on_snapshot_load(fsm.on_snapshot_save())
    assert other.users.credential("alice", M256) == cred
    assert other.users.bootstrapped == {("alice", M256)}
    # The snapshot is compressed: look for the password in what it decompresses to.
    assert b"plain-password-never-stored" not in zlib.decompress(fsm.on_snapshot_save())


def test_bootstrap_users_written_by_the_leader():
    node = node_with_users([("admin", "admin-pw")])

    async def run():
        node.users.on_leadership_change()
        await node.users._task

    asyncio.run(run())
    table = node.fsm.users
    assert sorted(m for m, _ in dict(table.describe())["admin"]) == [M256, M512]
    sess = SaslSession(SaslPolicy(("PLAIN",)), node.users.credential)
    sess.handshake("PLAIN", 1)
    assert sess.authenticate(b"\0admin\0admin-pw").error == ErrorCode.none


def _upsertion(name, mech_type, password="pw", iterations=4096, salt=b"salt" * 4):
    mech = {1: M256, 2: M512}.get(mech_type, M512)
    return {
        "name": name,
        "mechanism": mech_type,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted_password(mech, password, salt or b"x", max(iterations, 4096)),
    }


def test_alter_and_describe_user_scram_credentials():
    node = node_with_users()
    resp = call(
        node,
        51,
        0,
        {
            "deletions": [{"name": "ghost", "mechanism": 1}],
            "upsertions": [
                _upsertion("alice", 2),
                _upsertion("alice", 1, iterations=8192),
                _upsertion("bob", 2, iterations=100),
                _upsertion("carol", 7),
                _upsertion("dave", 2, salt=b""),
                _upsertion("erin", 2),
                _upsertion("erin", 2),
            ],
        },
    )
    got = {r.user: int(r.error_code) for r in resp.results}
    assert got == {
        "ghost": ErrorCode.resource_not_found,
        "alice": 0,
        "bob": ErrorCode.unacceptable_credential,
        "carol": ErrorCode.unsupported_sasl_mechanism,
        "dave": ErrorCode.unacceptable_credential,
        "erin": ErrorCode.duplicate_resource,
    }
    # Only the derived credential is stored: it verifies the password.
    salt = b"salt" * 4
    want = credential_from_salted(M512, salted_password(M512, "pw", salt, 4096), salt, 4096)
    assert node.fsm.users.credential("alice", M512) == want

    desc = call(node, 50, 0, {"users": None})
    assert [
        (r.user, [(int(c.mechanism), int(c.iterations)) for c in r.credential_infos])
        for r in desc.results
    ] == [("alice", [(1, 8192), (2, 4096)])]
    desc = call(node, 50, 0, {"users": [{"name": "alice"}, {"name": "zed"}, {"name": "zed"}]})
    assert [(r.user, int(r.error_code)) for r in desc.results] == [
        ("alice", 0),
        ("zed", ErrorCode.duplicate_resource),
    ]
    desc = call(node, 50, 0, {"users": [{"name": "nobody"}]})
    assert int(desc.results[0].error_code) == ErrorCode.resource_not_found


def test_alter_on_a_follower_is_not_controller_and_writes_nothing():
    node = node_with_users()
    node.lead = 2
    resp = call(node, 51, 0, {"deletions": [], "upsertions": [_upsertion("alice", 2)]})
    assert [int(r.error_code) for r in resp.results] == [ErrorCode.not_controller]
    assert node.fsm.users.describe() == []


def _sasl_call(api_key: int, version: int, values: dict, session):
    from kio.serial import entity_reader

    from sink.kafka.protocol.schemas import request_schema, response_schema

    frame = encode(api_key, version, values, corr=9)
    cls = request_schema(api_key, version)
    _h, n = entity_reader(cls.__header_schema__)(frame, 0)
    req = entity_reader(cls)(frame, n)[0]

    async def run():
        fut = await REGISTRY[api_key].handle(
            MemoryNode().context(), Call(version, 9, req, frame, sasl=session)
        )
        return await fut

    raw = asyncio.run(run())
    rcls = response_schema(api_key, version)
    _hdr, n = entity_reader(rcls.__header_schema__)(raw, 0)
    return entity_reader(rcls)(raw, n)[0]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_sasl_handlers_drive_the_session(version):
    cred = make_credential(M512, "pw", 4096)
    sess = SaslSession(
        SaslPolicy((M512, "PLAIN"), session_lifetime_ms=5000),
        lambda u, m: cred if (u, m) == ("alice", M512) else None,
    )
    hs = _sasl_call(17, 1, {"mechanism": "PLAIN"}, sess)
    assert int(hs.error_code) == 0 and list(hs.mechanisms) == [M512, "PLAIN"]
    auth = _sasl_call(36, version, {"auth_bytes": b"\0alice\0pw"}, sess)
    assert int(auth.error_code) == 0 and sess.principal == "User:alice"
    if version >= 1:
        assert auth.session_lifetime.total_seconds() == 5.0


def test_sasl_handlers_without_sasl_and_with_a_disabled_mechanism():
    hs = _sasl_call(17, 1, {"mechanism": "PLAIN"}, None)
    assert int(hs.error_code) == ErrorCode.illegal_sasl_state and list(hs.mechanisms) == []
    auth = _sasl_call(36, 2, {"auth_bytes": b"x"}, None)
    assert int(auth.error_code) == ErrorCode.illegal_sasl_state
    sess = SaslSession(SaslPolicy((M512,)), lambda u, m: None)
    hs = _sasl_call(17, 0, {"mechanism": "PLAIN"}, sess)
    assert int(hs.error_code) == ErrorCode.unsupported_sasl_mechanism
    assert list(hs.mechanisms) == [M512] and sess.failed
