"""OffsetCommit, minimal: offsets kept in memory by the coordinator (the Raft
leader, see FindCoordinator). NOT replicated: lost on failover or restart
(consumers then fall back to auto.offset.reset). No group membership is served."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.offset_commit.v9.request import OffsetCommitRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    leader = ctx.leadership.is_leader()
    err = ErrorCode.none if leader else ErrorCode.not_coordinator
    for t in req.topics:
        for p in t.partitions:
            if leader:
                ctx.offsets.commit_offset(
                    req.group_id,
                    t.name,
                    p.partition_index,
                    p.committed_offset,
                    p.committed_metadata,
                )
    return answered(error_response(call.version, call.corr, req, err))


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    """Every partition with code (the success answer is code none)."""
    if req is None:
        return None
    topics = [
        {
            "name": t.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
            ],
        }
        for t in req.topics
    ]
    body = {"throttle_time": 0, "topics": topics}
    return encode_response(OffsetCommitRequest.__api_key__, version, corr, body)


API = Api(
    OffsetCommitRequest,
    (2, 9),
    handle,
    error_response,
    summary=(
        "in memory on the coordinator (the Raft leader), not replicated: lost on failover/restart"
    ),
)
