"""ACLs over Kafka's own admin APIs (CreateAcls / DescribeAcls / DeleteAcls v3), with
sink.kafka.admin's one-request connections: what `raftsink acl` speaks. Changes go to
the controller (Raft leader); a NOT_CONTROLLER answer (leadership moved) looks it up
again, a few times."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kio.schema.create_acls.v3.request import CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest

from sink.kafka.admin import AdminError, find_controller, request
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

_VERSION = 3
_ATTEMPTS = 5

Address = tuple[str, int]


def _filter_values(f: AclFilter) -> dict:
    return {
        "resource_type_filter": int(f.resource_type),
        "resource_name_filter": f.name,
        "pattern_type_filter": int(f.pattern_type),
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": int(f.operation),
        "permission_type": int(f.permission),
    }


async def _at_controller(bootstrap: Sequence[Address], api_key: int, values: dict, codes):
    """Send to the controller; again while every answer code is NOT_CONTROLLER."""
    for attempt in range(_ATTEMPTS):
        addr = await find_controller(bootstrap)
        resp = await request(addr, api_key, _VERSION, values)
        if all(c != ErrorCode.not_controller for c in codes(resp)) or attempt == _ATTEMPTS - 1:
            return resp
        await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


async def create_acls(
    bootstrap: Sequence[Address], bindings: Sequence[AclBinding]
) -> list[tuple[ErrorCode, str | None]]:
    """Each binding's (error, message)."""
    values = {
        "creations": [
            {
                "resource_type": int(b.resource_type),
                "resource_name": b.name,
                "resource_pattern_type": int(b.pattern_type),
                "principal": b.principal,
                "host": b.host,
                "operation": int(b.operation),
                "permission_type": int(b.permission),
            }
            for b in bindings
        ]
    }
    resp = await _at_controller(
        bootstrap,
        CreateAclsRequest.__api_key__,
        values,
        lambda r: [x.error_code for x in r.results],
    )
    return [(r.error_code, r.error_message) for r in resp.results]


async def describe_acls(
    bootstrap: Sequence[Address], f: AclFilter, *, at_node: bool = False
) -> list[AclBinding]:
    """The bindings the filter matches, as the controller has them applied (at_node:
    as the first bootstrap node has them: tests waiting for every node to apply)."""
    addr = bootstrap[0] if at_node else await find_controller(bootstrap)
    resp = await request(addr, DescribeAclsRequest.__api_key__, _VERSION, _filter_values(f))
    if resp.error_code != ErrorCode.none:
        raise AdminError(f"{resp.error_code.name.upper()}: {resp.error_message or ''}")
    return [
        AclBinding(
            ResourceType(int(r.resource_type)),
            r.resource_name,
            PatternType(int(r.pattern_type)),
            a.principal,
            a.host,
            Operation(int(a.operation)),
            Permission(int(a.permission_type)),
        )
        for r in resp.resources
        for a in r.acls
    ]


async def delete_acls(
    bootstrap: Sequence[Address], filters: Sequence[AclFilter]
) -> list[tuple[ErrorCode, str | None, list[AclBinding]]]:
    """Per filter: (error, message, the bindings it removed)."""
    resp = await _at_controller(
        bootstrap,
        DeleteAclsRequest.__api_key__,
        {"filters": [_filter_values(f) for f in filters]},
        lambda r: [x.error_code for x in r.filter_results],
    )
    return [
        (
            r.error_code,
            r.error_message,
            [
                AclBinding(
                    ResourceType(int(m.resource_type)),
                    m.resource_name,
                    PatternType(int(m.pattern_type)),
                    m.principal,
                    m.host,
                    Operation(int(m.operation)),
                    Permission(int(m.permission_type)),
                )
                for m in r.matching_acls
            ],
        )
        for r in resp.filter_results
    ]
