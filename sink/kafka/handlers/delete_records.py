"""DeleteRecords (KIP-107): move a partition's log start through the log, on the
leader of the Raft group that owns it (PartitionRoles.role; a follower or a node
hosting no replica answers NOT_LEADER_OR_FOLLOWER). offset -1 means the high
watermark; an offset beyond the high watermark -> OFFSET_OUT_OF_RANGE. Answers the
low watermark (the new log start; a smaller offset than the current start leaves it
and answers it). Afterwards Fetch below the start gets OFFSET_OUT_OF_RANGE and
ListOffsets earliest answers the start.

Authorization (as Kafka): DELETE on each topic; a topic the principal may not
delete answers TOPIC_AUTHORIZATION_FAILED for each of its partitions and its log
start does not move, the others are served."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.delete_records.v2.request import DeleteRecordsRequest

from sink.kafka.authorize import topic_denied
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_delete(ctx, call))


async def _delete(ctx: HandlerContext, call: Call) -> bytes:
    topics = []
    for t in call.req.topics:
        parts = []
        denied = topic_denied(ctx, call, Operation.DELETE, t.name)
        for p in t.partitions:
            if denied:
                err, low = ErrorCode.topic_authorization_failed, -1
            elif ctx.lifecycle is None:
                err, low = ErrorCode.unsupported_version, -1
            elif (
                ctx.partitions.has_partition(t.name, p.partition_index)
                and not ctx.role(t.name, p.partition_index).leads
            ):  # the partition's group leader moves its log start
                err, low = ErrorCode.not_leader_or_follower, -1
            else:
                err, low = await ctx.lifecycle.delete_records(t.name, p.partition_index, p.offset)
            parts.append(
                {"partition_index": p.partition_index, "low_watermark": low, "error_code": err}
            )
        topics.append({"name": t.name, "partitions": parts})
    return _encode(call.version, call.corr, topics)


def _encode(version: int, corr: int, topics: list) -> bytes:
    body = {"throttle_time": 0, "topics": topics}
    return encode_response(DeleteRecordsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    topics = [
        {
            "name": t.name,
            "partitions": [
                {"partition_index": p.partition_index, "low_watermark": -1, "error_code": code}
                for p in t.partitions
            ],
        }
        for t in req.topics
    ]
    return _encode(version, corr, topics)


API = Api(
    DeleteRecordsRequest,
    (0, 2),
    handle,
    error_response,
    summary=(
        "advances the log start through the log on the leader; -1 = high watermark; "
        "beyond it OFFSET_OUT_OF_RANGE; answers the low watermark"
    ),
)
