"""LeaveGroup: v0-2 one member (errors at the top), v3+ a batch of members, each
by member id or (static members) group.instance.id."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.leave_group.v5.request import LeaveGroupRequest

from sink.groups.messages import LeaveResponse
from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


def _members(version: int, req: Any) -> list[tuple[str, str | None]]:
    if version < 3:
        return [(req.member_id, None)]
    return [(m.member_id, m.group_instance_id) for m in req.members]


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    if ctx.groups is None:
        return answered(
            error_response(call.version, call.corr, call.req, ErrorCode.coordinator_not_available)
        )
    groups, version = ctx.groups, call.version
    members = _members(version, call.req)

    async def answer() -> Response:
        r = await groups.leave(call.req.group_id, members)
        return encode(version, call.corr, r)

    return later(answer())


def encode(version: int, corr: int, r: LeaveResponse) -> bytes:
    top = r.error
    if version < 3 and top == ErrorCode.none and r.members:
        top = r.members[0][2]  # one member: its error is the answer
    body = {
        "throttle_time": 0,
        "error_code": top,
        "members": [
            {"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in r.members
        ],
    }
    return encode_response(LeaveGroupRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    members = _members(version, req) if req is not None else []
    return encode(version, corr, LeaveResponse(code, tuple((m, i, code) for m, i in members)))


API = Api(
    LeaveGroupRequest,
    (0, 5),
    handle,
    error_response,
    summary="v3+ batches; static members leave by group.instance.id",
)
