"""DeleteGroups: v0-2. Only Empty groups (else NON_EMPTY_GROUP); unknown ones
GROUP_ID_NOT_FOUND. The deletion goes through the log and is answered once
committed.

Authorization (as Kafka): DELETE on each group; a group the principal may not delete
answers GROUP_AUTHORIZATION_FAILED and is not deleted, the others are (results in
the request's order)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

from sink.kafka.authorize import group_denied
from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    ids = list(call.req.groups_names)
    denied = {g for g in ids if group_denied(ctx, call, Operation.DELETE, g)}
    allowed = [g for g in ids if g not in denied]
    if ctx.groups is None or not allowed:
        code = ErrorCode.coordinator_not_available
        return answered(encode(call.version, call.corr, _merge(ids, denied, [], code)))
    groups = ctx.groups

    async def answer() -> Response:
        done = await groups.delete(allowed)
        return encode(call.version, call.corr, _merge(ids, denied, done, ErrorCode.none))

    return later(answer())


def _merge(
    ids: list[str], denied: set[str], done: list[tuple[str, ErrorCode]], missing: ErrorCode
) -> list[tuple[str, ErrorCode]]:
    """Each requested group's result in the request's order: the denied ones
    GROUP_AUTHORIZATION_FAILED, the others as the coordinator answered (missing:
    the code of one it did not answer)."""
    answered_ = dict(done)
    return [
        (g, ErrorCode.group_authorization_failed if g in denied else answered_.get(g, missing))
        for g in ids
    ]


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
