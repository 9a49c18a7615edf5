"""Authorizer: the ACL decision every Kafka handler asks, with the node's policy
(super users, allow_if_no_acls) over the applied bindings (sink.state.acls, read
through a callable: a snapshot load replaces the table).

Decisions are cached per (principal, host, operation, resource): Produce asks once
per partition of every request. Invariant: the cache belongs to one table object at
one version; any change to the bindings (a new version, or a new table) drops it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from sink.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    decide,
)
from sink.security.authz_options import AuthorizationOptions

_CACHE_MAX = 10_000


class BindingSource(Protocol):
    """The applied bindings (sink.state.acls.AclTable)."""

    version: int

    def bindings(self, rtype: ResourceType | None = None) -> list[AclBinding]: ...


class Authorizer:
    def __init__(
        self,
        table: Callable[[], BindingSource],
        options: AuthorizationOptions,
        extra_super_users: Iterable[str] = (),
    ) -> None:
        """extra_super_users: principals the node trusts besides authorization.super_users
        (the SASL relay user)."""
        self._table = table
        self.options = options
        self.super_users = frozenset((*options.super_user_list(), *extra_super_users))
        self._cache: dict[tuple, bool] = {}
        self._cache_of: tuple[int, int] = (0, -1)  # (id of the table, its version)

    def is_super(self, principal: str) -> bool:
        return principal in self.super_users

    def allowed(
        self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        table = self._table()
        mark = (id(table), table.version)
        if mark != self._cache_of:
            self._cache.clear()
            self._cache_of = mark
        key = (principal, host, op, rtype, name)
        hit = self._cache.get(key)
        if hit is None:
            hit = decide(
                table.bindings(rtype),
                principal,
                host,
                op,
                rtype,
                name,
                self.options.allow_if_no_acls,
            )
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def allowed_on_some(
        self, principal: str, host: str, op: Operation, rtype: ResourceType
    ) -> bool:
        """Is op allowed on at least one resource of rtype (Kafka's authorizeByResourceType,
        used for InitProducerId: WRITE on any topic)? An ALLOW that applies counts unless
        a DENY of op on every resource of the type (LITERAL "*") applies too."""
        if principal in self.super_users:
            return True
        applies = [
            b
            for b in self._table().bindings(rtype)
            if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)
        ]
        for b in applies:
            if (
                b.permission is Permission.DENY
                and b.operation in (op, Operation.ALL)
                and b.pattern_type is PatternType.LITERAL
                and b.name == WILDCARD
            ):
                return False
        return any(
            b.permission is Permission.ALLOW and b.operation in (op, Operation.ALL) for b in applies
        )
