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
    if not ctx.leadership.is_leader():
        return answered(error_response(call.version, call.corr, req, ErrorCode.not_coordinator))
    fsm = ctx.partitions
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            # Kafka refuses offsets of partitions it does not host (an unknown topic, or an
            # index past the topic's count): nothing is stored for them.
            if not fsm.has_partition(t.name, p.partition_index):
                err = ErrorCode.unknown_topic_or_partition
            else:
                err = ErrorCode.none
                ctx.offsets.commit_offset(
                    req.group_id,
                    t.name,
                    p.partition_index,
                    p.committed_offset,
                    p.committed_metadata,
                )
            parts.append({"partition_index": p.partition_index, "error_code": err})
        topics.append({"name": t.name, "partitions": parts})
    return answered(_encode(call.version, call.corr, topics))


def _encode(version: int, corr: int, topics: list) -> bytes:
    body = {"throttle_time": 0, "topics": topics}
    return encode_response(OffsetCommitRequest.__api_key__, version, corr, body)


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
    return _encode(version, corr, topics)


API = Api(
    OffsetCommitRequest,
    (2, 9),
    handle,
    error_response,
    summary=(
        "in memory on the coordinator (the Raft leader), not replicated: lost on failover/restart"
    ),
)
