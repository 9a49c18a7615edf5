"""The ACL requests' wire items as validated domain values: a CreateAcls creation as
an AclBinding, a DescribeAcls request or a DeleteAcls filter as an AclFilter. Each
raises AclError/ValueError for what is not one (the handlers answer INVALID_REQUEST).
Before v1 there was no pattern type: LITERAL, as in Kafka."""

from __future__ import annotations

from typing import Any

from sink.security.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)


def binding_of(c: Any) -> AclBinding:
    """A CreateAcls creation as a validated binding."""
    b = AclBinding(
        ResourceType(int(c.resource_type)),
        c.resource_name,
        PatternType(int(getattr(c, "resource_pattern_type", PatternType.LITERAL))),
        c.principal,
        c.host,
        Operation(int(c.operation)),
        Permission(int(c.permission_type)),
    )
    b.validate()
    return b


def filter_of(f: Any) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter as a validated filter."""
    out = AclFilter(
        ResourceType(int(f.resource_type_filter)),
        f.resource_name_filter,
        PatternType(int(getattr(f, "pattern_type_filter", PatternType.LITERAL))),
        f.principal_filter,
        f.host_filter,
        Operation(int(f.operation)),
        Permission(int(f.permission_type)),
    )
    out.validate()
    return out
