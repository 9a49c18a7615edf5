"""SyncGroup: v0-5. The leader's assignment is written to the log as the group's
generation; the leader and every member are answered only after it is committed,
so a coordinator that takes over knows every generation a member acts on."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.sync_group.v5.request import SyncGroupRequest

from sink.groups.messages import SyncRequest, SyncResponse
from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


def request_of(call: Call) -> SyncRequest:
    req = call.req
    return SyncRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        instance_id=getattr(req, "group_instance_id", None),
        protocol_type=getattr(req, "protocol_type", None),
        protocol_name=getattr(req, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in req.assignments),
    )


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    if ctx.groups is None:
        return answered(
            error_response(call.version, call.corr, call.req, ErrorCode.coordinator_not_available)
        )
    groups = ctx.groups
    sreq = request_of(call)

    async def answer() -> Response:
        return encode(call.version, call.corr, await groups.sync(sreq))

    return later(answer())


def encode(version: int, corr: int, r: SyncResponse) -> bytes:
    body = {
        "throttle_time": 0,
        "error_code": r.error,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "assignment": r.assignment,
    }
    return encode_response(SyncGroupRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return encode(version, corr, SyncResponse(code))


API = Api(
    SyncGroupRequest,
    (0, 5),
    handle,
    error_response,
    summary="the leader's assignment goes through the log; everyone answered after commit",
)
