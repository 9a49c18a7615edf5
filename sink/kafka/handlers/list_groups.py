"""ListGroups: v0-5, the groups this node coordinates (every group on the Raft
leader; a follower answers an empty list, as a Kafka broker coordinating none).
v4 filters by state, v5 by type (these groups are all "classic")."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.list_groups.v5.request import ListGroupsRequest

from sink.groups.messages import ListedGroup
from sink.kafka.authorize import allowed
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import CLUSTER_NAME, Operation, ResourceType


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    if ctx.groups is None:
        err, groups = ErrorCode.coordinator_not_available, []
    else:
        err, groups = ctx.groups.list_groups(
            getattr(req, "states_filter", ()), getattr(req, "types_filter", ())
        )
        # As Kafka: all groups with DESCRIBE on the cluster, else those the principal
        # may DESCRIBE.
        if not allowed(ctx, call, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            groups = [
                g
                for g in groups
                if allowed(ctx, call, Operation.DESCRIBE, ResourceType.GROUP, g.group_id)
            ]
    return answered(encode(call.version, call.corr, err, groups))


def encode(version: int, corr: int, err: ErrorCode, groups: list[ListedGroup]) -> bytes:
    body = {
        "throttle_time": 0,
        "error_code": err,
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": "classic",
            }
            for g in groups
        ],
    }
    return encode_response(ListGroupsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return encode(version, corr, code, [])


API = Api(
    ListGroupsRequest,
    (0, 5),
    handle,
    error_response,
    summary="the leader lists every group, a follower none; v4 state and v5 type filters",
)
