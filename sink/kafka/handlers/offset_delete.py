"""OffsetDelete (v0, KIP-496): remove a group's committed offsets of some partitions,
through the Raft log (a DELETE_GROUP_OFFSETS entry), answered once applied.

As Kafka (GroupCoordinator.handleDeleteOffsets): the coordinator gate first
(NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, top level); a group that neither the
group coordinator nor the offset store knows -> GROUP_ID_NOT_FOUND; a group with
members -> its subscribed topics' partitions GROUP_SUBSCRIBED_TO_TOPIC (the others are
deleted), or NON_EMPTY_GROUP when the coordinator does not know its subscription;
unknown topic-partitions -> UNKNOWN_TOPIC_OR_PARTITION. A partition without an
offset answers NONE (nothing to delete).

Authorization (as Kafka's handleOffsetDeleteRequest): DELETE on the group is checked
before the handler (sink.kafka.authorize's gate: GROUP_AUTHORIZATION_FAILED, whole);
READ on each topic here: a topic the principal may not read answers
TOPIC_AUTHORIZATION_FAILED for its partitions and keeps its offsets, the others are
deleted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.offset_delete.v0.request import OffsetDeleteRequest

from sink.kafka.authorize import topic_denied
from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.group_gate import coordinator_error
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    group = req.group_id
    err = coordinator_error(ctx, group)
    status = ctx.offsets.membership.status(group) if err == ErrorCode.none else None
    if err == ErrorCode.none and status is None and not ctx.offsets.has_group(group):
        err = ErrorCode.group_id_not_found
    members_unknown_subscription = (
        status is not None and not status.empty and status.subscribed is None
    )
    if err == ErrorCode.none and members_unknown_subscription:
        err = ErrorCode.non_empty_group
    if err != ErrorCode.none:
        return answered(error_response(call.version, call.corr, req, err))
    subscribed = (
        status.subscribed
        if status is not None and not status.empty and status.subscribed is not None
        else frozenset()
    )
    codes: dict[tuple[str, int], ErrorCode] = {}
    deletable = []
    for t in req.topics:
        denied = topic_denied(ctx, call, Operation.READ, t.name)
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if denied:
                codes[key] = ErrorCode.topic_authorization_failed
            elif not ctx.partitions.has_partition(*key):
                codes[key] = ErrorCode.unknown_topic_or_partition
            elif t.name in subscribed:
                codes[key] = ErrorCode.group_subscribed_to_topic
            else:
                codes[key] = ErrorCode.none
                deletable.append(key)
    if not deletable:
        return answered(_encode(call.version, call.corr, ErrorCode.none, req, codes))
    return later(_delete(ctx, call, deletable, codes))


async def _delete(
    ctx: HandlerContext, call: Call, deletable: list, codes: dict[tuple[str, int], ErrorCode]
) -> bytes:
    err = await ctx.offsets.delete_offsets(call.req.group_id, deletable)
    if err != ErrorCode.none:
        return _encode(call.version, call.corr, err, call.req, None)
    return _encode(call.version, call.corr, ErrorCode.none, call.req, codes)


def _encode(
    version: int,
    corr: int,
    err: ErrorCode,
    req: Any,
    codes: dict[tuple[str, int], ErrorCode] | None,
) -> bytes:
    """codes None: a top-level error, no topics (Kafka's error response)."""
    topics = (
        []
        if codes is None
        else [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": codes[(t.name, p.partition_index)],
                    }
                    for p in t.partitions
                ],
            }
            for t in req.topics
        ]
    )
    body = {"error_code": err, "throttle_time": 0, "topics": topics}
    return encode_response(OffsetDeleteRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return _encode(version, corr, code, req, None)


API = Api(
    OffsetDeleteRequest,
    (0, 0),
    handle,
    error_response,
    summary=(
        "through the Raft log; GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC / NON_EMPTY_GROUP "
        "from the group coordinator"
    ),
)
