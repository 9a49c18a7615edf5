"""The ACL decision (sink.security.acl / authorizer), filters, the replicated table
(sink.state.acls, through the state machine and its snapshot) and principals."""

from __future__ import annotations

import pytest

from raftlog.entry import EntryType, LogEntry
from sink.security.acl import (
    ANONYMOUS,
    CLUSTER_NAME,
    AclBinding,
    AclError,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    decide,
)
from sink.security.acl_ops import create_op, delete_op, encode_alter_acls
from sink.security.authorizer import Authorizer
from sink.security.authz_options import AuthorizationConfigError, AuthorizationOptions
from sink.security.principal import PrincipalRuleError, parse_rules, tls_principal
from sink.state import SinkStateMachine
from sink.state.acls import AclTable

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE = "User:alice"


def acl(
    rtype=T, name="orders", pattern=LIT, principal=ALICE, host="*", op=Operation.READ, perm=ALLOW
):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def ok(bindings, op, name="orders", rtype=T, principal=ALICE, host="10.0.0.1", **kw) -> bool:
    return decide(bindings, principal, host, op, rtype, name, **kw)


def test_literal_prefixed_and_wildcard_names():
    assert ok([acl()], Operation.READ)
    assert not ok([acl()], Operation.READ, name="orders2")  # literal: the exact name only
    assert ok([acl(name="ord", pattern=PRE)], Operation.READ, name="orders2")
    assert not ok([acl(name="ord", pattern=PRE)], Operation.READ, name="xorders")
    assert ok([acl(name="*")], Operation.READ, name="anything")
    # "*" is a wildcard only as a LITERAL name; a PREFIXED "*" is the prefix "*".
    assert not ok([acl(name="*", pattern=PRE)], Operation.READ, name="anything")
    # The resource type must match too.
    assert not ok([acl(rtype=G)], Operation.READ)


def test_principal_and_host_must_match():
    assert not ok([acl()], Operation.READ, principal="User:bob")
    assert ok([acl(principal="User:*")], Operation.READ, principal="User:bob")
    assert ok([acl(host="10.0.0.1")], Operation.READ)
    assert not ok([acl(host="10.0.0.2")], Operation.READ)


def test_deny_wins_over_allow():
    both = [acl(op=Operation.ALL), acl(op=Operation.WRITE, perm=DENY)]
    assert ok(both, Operation.READ)
    assert not ok(both, Operation.WRITE)
    # A DENY of ALL on a prefix beats a literal ALLOW of the topic.
    assert not ok(
        [acl(), acl(name="ord", pattern=PRE, op=Operation.ALL, perm=DENY)], Operation.READ
    )
    # A wildcard-principal DENY applies to everyone.
    assert not ok([acl(), acl(principal="User:*", perm=DENY)], Operation.READ)


def test_implied_operations():
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert ok([acl(op=op)], Operation.DESCRIBE), op
    assert not ok([acl(op=Operation.CREATE)], Operation.DESCRIBE)
    assert ok([acl(op=Operation.ALTER_CONFIGS)], Operation.DESCRIBE_CONFIGS)
    assert not ok([acl(op=Operation.DESCRIBE_CONFIGS)], Operation.ALTER_CONFIGS)
    assert not ok([acl(op=Operation.DESCRIBE)], Operation.READ)
    # A DENY is not implied: DENY READ leaves an ALLOW DESCRIBE standing.
    assert ok([acl(op=Operation.DESCRIBE), acl(perm=DENY)], Operation.DESCRIBE)


def test_no_acls_found():
    assert not ok([], Operation.READ)
    assert ok([], Operation.READ, allow_if_no_acls=True)
    # Some binding names the resource (for someone else): no longer "no ACL found".
    assert not ok([acl(principal="User:bob")], Operation.READ, allow_if_no_acls=True)


class _Table:
    def __init__(self, bindings):
        self._b = list(bindings)
        self.version = 0

    def bindings(self, rtype=None):
        return [b for b in self._b if rtype is None or b.resource_type is rtype]


def test_authorizer_super_users_cache_and_idempotent_write():
    table = _Table([acl(op=Operation.WRITE)])
    az = Authorizer(lambda: table, AuthorizationOptions(super_users="User:admin;User:ops"))
    assert az.allowed("User:admin", "h", Operation.ALTER, C, CLUSTER_NAME)
    assert az.allowed(ALICE, "h", Operation.WRITE, T, "orders")
    assert not az.allowed(ALICE, "h", Operation.WRITE, T, "other")
    table._b.append(acl(op=Operation.WRITE, perm=DENY))
    assert az.allowed(ALICE, "h", Operation.WRITE, T, "orders")  # cached at version 0
    table.version += 1  # a change of the table drops the cache
    assert not az.allowed(ALICE, "h", Operation.WRITE, T, "orders")
    # InitProducerId: WRITE on some topic suffices (KIP-679), none for bob.
    assert az.allowed_on_some(ALICE, "h", Operation.WRITE, T)
    assert not az.allowed_on_some("User:bob", "h", Operation.WRITE, T)
    table._b.append(acl(name="*", op=Operation.WRITE, perm=DENY))
    assert not az.allowed_on_some(ALICE, "h", Operation.WRITE, T)


def test_bindings_are_validated():
    with pytest.raises(AclError):
        acl(pattern=PatternType.MATCH).validate()
    with pytest.raises(AclError):
        acl(principal="alice").validate()
    with pytest.raises(AclError):
        acl(rtype=C, name="other").validate()
    with pytest.raises(AclError):
        acl(op=Operation.ANY).validate()
    acl(rtype=C, name=CLUSTER_NAME, op=Operation.ALTER).validate()


def test_filters_any_match_literal_prefixed():
    lit, pre, star = acl(), acl(name="ord", pattern=PRE), acl(name="*")
    every = [lit, pre, star, acl(rtype=G, name="g1")]

    def found(f):
        return [b for b in every if f.matches(b)]

    assert found(AclFilter()) == every
    assert found(AclFilter(T, "orders", PatternType.MATCH)) == [lit, pre, star]
    assert found(AclFilter(T, "orders", PatternType.ANY)) == [lit]
    assert found(AclFilter(T, "ord", PatternType.PREFIXED)) == [pre]
    assert found(AclFilter(T, "ord", PatternType.LITERAL)) == []
    assert (
        found(AclFilter(ResourceType.ANY, None, PatternType.ANY, ALICE, None, Operation.READ))
        == every
    )
    assert found(AclFilter(permission=DENY)) == []


def _entry(index: int, ops) -> LogEntry:
    return LogEntry(index, 1, EntryType.DATA, encode_alter_acls(ops))


def test_table_through_the_state_machine_and_its_snapshot():
    fsm = SinkStateMachine()
    a, b = acl(), acl(rtype=G, name="g", op=Operation.READ)
    bad = {"op": "create", "acl": acl(principal="nobody").to_json()}
    [res] = fsm.on_apply([_entry(1, [create_op(a), bad, create_op(b), create_op(a)])])
    assert [r[0] for r in res] == [0, 42, 0, 0]  # the invalid one alone: INVALID_REQUEST
    assert fsm.acls.bindings() == [a, b]  # a created twice is stored once
    copy = SinkStateMachine()
    copy.on_snapshot_load(fsm.on_snapshot_save())
    assert copy.acls.bindings() == [a, b]
    [res] = copy.on_apply([_entry(2, [delete_op(AclFilter(T))])])
    assert res == [[a.to_json()]]
    assert copy.acls.bindings() == [b]
    # An unreadable entry is skipped, never a crash.
    assert fsm.on_apply([LogEntry(3, 1, EntryType.DATA, b"L{nope")]) == [None]
    assert isinstance(AclTable.from_json(fsm.acls.to_json()), AclTable)


def test_options_and_principals():
    with pytest.raises(AuthorizationConfigError):
        AuthorizationOptions(super_users="admin")
    with pytest.raises(AuthorizationConfigError):
        AuthorizationOptions(tls_principal_rules="RULE:(/x")
    with pytest.raises(PrincipalRuleError):
        parse_rules("BOGUS")
    cert = {
        "subject": (
            (("countryName", "DE"),),
            (("organizationName", "acme"),),
            (("commonName", "alice"),),
        )
    }
    assert tls_principal(cert, parse_rules("DEFAULT")) == "User:CN=alice,O=acme,C=DE"
    rules = parse_rules(r"RULE:^CN=([^,]*),O=acme.*$/$1/U,DEFAULT")
    assert tls_principal(cert, rules) == "User:ALICE"
    other = {"subject": ((("commonName", "bob"),),)}
    assert tls_principal(other, rules) == "User:CN=bob"  # no rule matched: DEFAULT
    assert tls_principal({}, rules) is None
    assert ANONYMOUS == "User:ANONYMOUS"
