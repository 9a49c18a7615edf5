"""ACLs as Kafka defines them (sans-I/O): bindings, filters and the decision.

A binding is (resource pattern) x (entry): resource type, name and pattern type
(LITERAL or PREFIXED), principal ("User:alice", "User:*"), host ("*" or an
address), operation and permission (ALLOW / DENY). The numbers are Kafka's
(org.apache.kafka.common.acl / resource), so they travel unchanged between the
wire, the log and the CLI.

The decision (`decide`), as Kafka's StandardAuthorizer makes it:
- the bindings that apply to a request are those whose pattern matches the
  resource (LITERAL with the same name or "*", PREFIXED with a prefix of it), whose
  principal is the request's or "User:*" and whose host is the client's or "*";
- any applying DENY of the operation (or ALL) refuses, whatever allows it (DENY wins);
- else an applying ALLOW of the operation, of ALL, or of an operation that implies
  it allows: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
  DESCRIBE_CONFIGS (a DENY is never implied: DENY READ does not deny DESCRIBE);
- else refused, unless no binding at all matches the resource and
  allow_if_no_acls (Kafka's allow.everyone.if.no.acl.found) is set.
Super users are decided before any of this (sink.security.authorizer).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
"""The only name of the CLUSTER resource (Kafka's)."""
WILDCARD = "*"
ANONYMOUS = "User:ANONYMOUS"
WILDCARD_PRINCIPAL = "User:*"

_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
"""An operation -> the allowed operations that allow it (besides ALL)."""


class AclError(ValueError):
    """A binding that cannot be stored (the message says why; INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        """AclError unless the binding is concrete (no ANY/MATCH/UNKNOWN) and well-formed."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise AclError(f"resource type {self.resource_type.name} cannot be stored")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"pattern type {self.pattern_type.name}: use LITERAL or PREFIXED")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise AclError(f"operation {self.operation.name} cannot be stored")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError(f"permission {self.permission.name}: use ALLOW or DENY")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise AclError(f"principal {self.principal!r} is not TYPE:NAME (e.g. User:alice)")
        if not self.name:
            raise AclError("empty resource name")
        if not self.host:
            raise AclError("empty host (use * for any)")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise AclError(f"the CLUSTER resource is named {CLUSTER_NAME!r}, not {self.name!r}")

    def resource_matches(self, rtype: ResourceType, name: str) -> bool:
        """Does this binding's pattern apply to the resource (rtype, name)?"""
        if self.resource_type is not rtype:
            return False
        if self.pattern_type is PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return name.startswith(self.name)  # PREFIXED

    def to_json(self) -> list:
        return [
            int(self.resource_type),
            self.name,
            int(self.pattern_type),
            self.principal,
            self.host,
            int(self.operation),
            int(self.permission),
        ]

    @classmethod
    def from_json(cls, row: list) -> AclBinding:
        rt, name, pt, principal, host, op, perm = row
        return cls(
            ResourceType(rt),
            str(name),
            PatternType(pt),
            str(principal),
            str(host),
            Operation(op),
            Permission(perm),
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None / ANY match everything in their place; pattern
    type MATCH matches the bindings that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        for what, value in (
            ("resource type", self.resource_type),
            ("pattern type", self.pattern_type),
            ("operation", self.operation),
            ("permission", self.permission),
        ):
            if value == 0:  # UNKNOWN
                raise AclError(f"{what} UNKNOWN in a filter")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            self.pattern_type is not b.pattern_type
        ):
            return False
        if self.name is not None and not self._name_matches(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation is not Operation.ANY and self.operation is not b.operation:
            return False
        return self.permission is Permission.ANY or self.permission is b.permission

    def _name_matches(self, b: AclBinding) -> bool:
        # ResourcePatternFilter.matches: exact name, except MATCH (what applies).
        if self.pattern_type is not PatternType.MATCH:
            return self.name == b.name
        assert self.name is not None
        if b.pattern_type is PatternType.LITERAL:
            return self.name == b.name or b.name == WILDCARD
        return self.name.startswith(b.name)


def _entry_applies(b: AclBinding, principal: str, host: str) -> bool:
    return b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)


def decide(
    bindings: list[AclBinding],
    principal: str,
    host: str,
    operation: Operation,
    rtype: ResourceType,
    name: str,
    allow_if_no_acls: bool = False,
) -> bool:
    """Is principal, connecting from host, allowed operation on (rtype, name)?
    bindings: all the stored ones (the resource filter is applied here). See the
    module docstring for the rules."""
    on_resource = [b for b in bindings if b.resource_matches(rtype, name)]
    if not on_resource:
        return allow_if_no_acls
    allowed_by = _IMPLIED_BY.get(operation, frozenset({operation}))
    allow = False
    for b in on_resource:
        if not _entry_applies(b, principal, host):
            continue
        if b.permission is Permission.DENY:
            if b.operation is operation or b.operation is Operation.ALL:
                return False
        elif b.operation is Operation.ALL or b.operation in allowed_by:
            allow = True
    return allow
