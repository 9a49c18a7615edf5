"""DeleteTopics: through the log, on the Raft leader (the controller); a follower
relays it there (sink.kafka.handlers.controller_relay; NOT_CONTROLLER when it knows no
controller or cannot reach it). v1-5 name topics; v6 names them or gives their topic
id (a name of null). Unknown names answer UNKNOWN_TOPIC_OR_PARTITION, unknown ids
UNKNOWN_TOPIC_ID. After the delete, Produce and Fetch of the topic answer
UNKNOWN_TOPIC_OR_PARTITION (by id: UNKNOWN_TOPIC_ID); batches of it still in flight
are refused at apply time; the space goes back as retention compacts the log."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.schema.delete_topics.v6.request import DeleteTopicsRequest

from sink.kafka.authorize import topic_allowed
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation

_NO_TOPIC_ID = uuid.UUID(int=0)


def _asked(version: int, req: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    if version >= 6:
        return [
            (t.name, None if t.topic_id in (None, _NO_TOPIC_ID) else t.topic_id) for t in req.topics
        ]
    return [(name, None) for name in req.topic_names]


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_delete(ctx, call))


async def _delete(ctx: HandlerContext, call: Call) -> bytes:
    asked = _asked(call.version, call.req)
    permitted = [
        topic_allowed(ctx, call, Operation.DELETE, _name_of(ctx, name, topic_id))
        for name, topic_id in asked
    ]
    allowed = ctx.lifecycle is not None and all(permitted)
    relayed = await relay_to_controller(ctx, call, allowed=allowed, timeout=call.req.timeout)
    if relayed is not None:
        return relayed
    out = []
    for (name, topic_id), may in zip(asked, permitted, strict=True):
        if ctx.lifecycle is None:
            err, msg = ErrorCode.unsupported_version, "topic deletion is not served here"
        elif not may:
            err, msg = ErrorCode.topic_authorization_failed, "DELETE on the topic is not allowed"
        elif not ctx.controller.is_leader():
            err, msg = ErrorCode.not_controller, "not the controller (Raft leader)"
        elif name is None and topic_id is None:
            err, msg = ErrorCode.invalid_request, "neither a topic name nor a topic id"
        else:
            res = await ctx.lifecycle.delete_topic(name, topic_id)
            err, name, topic_id = res.error, res.name or name, res.topic_id or topic_id
            msg = None if err == ErrorCode.none else f"delete topic failed ({err.name})"
        out.append(
            {
                "name": name,
                "topic_id": topic_id or _NO_TOPIC_ID,
                "error_code": err,
                "error_message": msg,
            }
        )
    return _encode(call.version, call.corr, out)


def _name_of(ctx: HandlerContext, name: str | None, topic_id: uuid.UUID | None) -> str:
    """The topic's name for the ACL check (by id: the applied topic's, "" if unknown)."""
    if name is not None:
        return name
    info = ctx.partitions.topic_by_id(topic_id) if topic_id is not None else None
    return info.name if info is not None else ""


def _encode(version: int, corr: int, responses: list) -> bytes:
    body = {"throttle_time": 0, "responses": responses}
    return encode_response(DeleteTopicsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    return _encode(
        version,
        corr,
        [
            {"name": n, "topic_id": i or _NO_TOPIC_ID, "error_code": code, "error_message": None}
            for n, i in _asked(version, req)
        ],
    )


API = Api(
    DeleteTopicsRequest,
    (1, 6),
    handle,
    error_response,
    summary=(
        "through the log on the leader (a follower relays it); by name or topic id (v6); "
        "late Produce/Fetch get UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID"
    ),
)
