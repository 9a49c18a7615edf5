"""Heartbeat: v0-4. Keeps a member's session (in memory on the coordinator, never
logged); REBALANCE_IN_PROGRESS tells the member to rejoin."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.heartbeat.v4.request import HeartbeatRequest as KioHeartbeatRequest

from sink.groups.messages import HeartbeatRequest
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    if ctx.groups is None:
        return answered(encode(call.version, call.corr, ErrorCode.coordinator_not_available))
    req = call.req
    hreq = HeartbeatRequest(
        req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None)
    )
    # Heartbeats are answered at once: the runtime resolves them in the same step.
    err = await ctx.groups.heartbeat(hreq)
    return answered(encode(call.version, call.corr, err))


def encode(version: int, corr: int, err: ErrorCode) -> bytes:
    body = {"throttle_time": 0, "error_code": err}
    return encode_response(KioHeartbeatRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return encode(version, corr, code)


API = Api(
    KioHeartbeatRequest,
    (0, 4),
    handle,
    error_response,
    summary="sessions in memory on the coordinator; a failover gives members a fresh session",
)
