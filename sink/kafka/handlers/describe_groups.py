"""DescribeGroups: v0-5, from the coordinator's live groups. Members' metadata and
assignments only while the group is Stable (as Kafka); an unknown group is
described as Dead with error NONE (Kafka before v6)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

from sink.groups.messages import DescribedGroup
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode

_NO_OPERATIONS = -(2**31)


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    ids = list(call.req.groups)
    if ctx.groups is None:
        described = [
            DescribedGroup(g, ErrorCode.coordinator_not_available, "", "", "") for g in ids
        ]
    else:
        described = ctx.groups.describe(ids)
    return answered(encode(call.version, call.corr, described))


def encode(version: int, corr: int, groups: list[DescribedGroup]) -> bytes:
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
                "authorized_operations": _NO_OPERATIONS,
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
