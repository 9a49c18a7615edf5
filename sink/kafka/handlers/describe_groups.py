"""DescribeGroups: v0-5, from the coordinator's live groups. Members' metadata and
assignments only while the group is Stable (as Kafka); an unknown group is
described as Dead with error NONE (Kafka before v6).

Authorization (as Kafka): DESCRIBE on each group; a group the principal may not
describe answers GROUP_AUTHORIZATION_FAILED (nothing else of it), the others are
described. authorized_operations (v3+, include_authorized_operations): each
described group's bit set (sink.kafka.authorize.authorized_operations), else
INT32_MIN."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

from sink.groups.messages import DescribedGroup
from sink.kafka.authorize import NOT_REQUESTED, authorized_operations, group_denied
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation, ResourceType


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    ids = list(call.req.groups)
    denied = {g for g in ids if group_denied(ctx, call, Operation.DESCRIBE, g)}
    allowed = [g for g in ids if g not in denied]
    if ctx.groups is None:
        described = [
            DescribedGroup(g, ErrorCode.coordinator_not_available, "", "", "") for g in allowed
        ]
    else:
        described = ctx.groups.describe(allowed) if allowed else []
    by_id = {d.group_id: d for d in described}
    refused = ErrorCode.group_authorization_failed
    dead = ErrorCode.none  # a group the coordinator did not name: described as Dead
    groups = [
        DescribedGroup(g, refused, "", "", "")
        if g in denied
        else by_id.get(g, DescribedGroup(g, dead, "Dead", "", ""))
        for g in ids
    ]
    ops: dict[str, int] = {}
    if getattr(call.req, "include_authorized_operations", False):
        ops = {
            g.group_id: authorized_operations(ctx, call, ResourceType.GROUP, g.group_id)
            for g in groups
            if g.group_id not in denied
        }
    return answered(encode(call.version, call.corr, groups, ops))


def encode(
    version: int, corr: int, groups: list[DescribedGroup], ops: dict[str, int] | None = None
) -> bytes:
    """ops: group id -> authorized_operations (absent: NOT_REQUESTED)."""
    ops = ops or {}
    body = {
        "throttle_time": 0,
        "groups": [
            {
                "error_code": g.error,
                "group_id": g.group_id,
                "group_state": g.state,
                "protocol_type": g.protocol_type,
                "protocol_data": g.protocol_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in g.members
                ],
                "authorized_operations": ops.get(g.group_id, NOT_REQUESTED),
            }
            for g in groups
        ],
    }
    return encode_response(DescribeGroupsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    return encode(version, corr, [DescribedGroup(g, code, "", "", "") for g in req.groups])


API = Api(
    DescribeGroupsRequest,
    (0, 5),
    handle,
    error_response,
    summary="live state; metadata/assignments while Stable; unknown groups Dead",
)
