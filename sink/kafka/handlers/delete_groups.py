"""DeleteGroups: v0-2. Only Empty groups (else NON_EMPTY_GROUP); unknown ones
GROUP_ID_NOT_FOUND. The deletion goes through the log and is answered once
committed."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    ids = list(call.req.groups_names)
    if ctx.groups is None:
        return answered(
            error_response(call.version, call.corr, call.req, ErrorCode.coordinator_not_available)
        )
    groups = ctx.groups

    async def answer() -> Response:
        return encode(call.version, call.corr, await groups.delete(ids))

    return later(answer())


def encode(version: int, corr: int, results: list[tuple[str, ErrorCode]]) -> bytes:
    body = {
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": e} for g, e in results],
    }
    return encode_response(DeleteGroupsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    return encode(version, corr, [(g, code) for g in req.groups_names])


API = Api(
    DeleteGroupsRequest,
    (0, 2),
    handle,
    error_response,
    summary="Empty groups only; through the log",
)
