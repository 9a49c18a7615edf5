"""OffsetForLeaderEpoch (KIP-320), v2-v4: where a leader epoch ended, so a consumer can
check after a leader change that the records it read are still the log's.

The leader epoch is the Raft term (Metadata reports the current term, served batches
carry their entry's term). Each partition keeps the first offset of every term that
appended to it (sink.state.epochs, applied state). For a requested epoch E the answer
is Kafka's (LeaderEpochFileCache.endOffsetFor): E is the current term -> (E, high
watermark); else the largest epoch <= E with records and the first offset of the next
epoch with records (the high watermark if none); E = -1 or above the current term ->
(-1, -1). Committed Raft entries never truncate, so the end offset is never below a
position the consumer reached in E: no client ever sees a truncation here.

Errors per partition, as Kafka's leader, each against the Raft group that owns the
partition (PartitionRoles.role): a follower or a node hosting no replica ->
NOT_LEADER_OR_FOLLOWER;
unknown partition -> UNKNOWN_TOPIC_OR_PARTITION; current_leader_epoch (when not -1)
older than the term -> FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH (the client
refreshes Metadata); a new leader whose own-term entry is not applied yet ->
OFFSET_NOT_AVAILABLE (retriable); a topic the principal may not DESCRIBE (ACLs on) ->
TOPIC_AUTHORIZATION_FAILED for its partitions, the other topics answered. v0-1 were removed in Kafka 4.0; no client sends
them (librdkafka v2, the Java client v3+, kafka-python the broker's maximum).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderEpochRequest

from sink.kafka.authorize import topic_denied
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation


def _answer(ctx: HandlerContext, topic: str, p: Any) -> dict[str, Any]:
    role, fsm = ctx.role(topic, p.partition), ctx.partitions
    term = role.leader_epoch  # the term of the group that owns the partition
    current = p.current_leader_epoch
    if not role.leads:
        err = ErrorCode.not_leader_or_follower
    elif not fsm.has_partition(topic, p.partition):
        err = ErrorCode.unknown_topic_or_partition
    elif current >= 0 and current < term:
        err = ErrorCode.fenced_leader_epoch
    elif current > term:
        err = ErrorCode.unknown_leader_epoch
    elif not role.ready:
        err = ErrorCode.offset_not_available
    else:
        hw = fsm.high_watermark(topic, p.partition)
        epoch, end = fsm.epochs.end_offset_for(topic, p.partition, p.leader_epoch, term, hw)
        return _entry(p.partition, ErrorCode.none, epoch, end)
    return _entry(p.partition, err)


def _entry(partition: int, err: ErrorCode, epoch: int = -1, end: int = -1) -> dict[str, Any]:
    return {"error_code": err, "partition": partition, "leader_epoch": epoch, "end_offset": end}


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    topics = []
    for t in call.req.topics:
        if topic_denied(ctx, call, Operation.DESCRIBE, t.topic):
            # Per topic, as Kafka: the topics the principal may describe are answered.
            parts = [
                _entry(p.partition, ErrorCode.topic_authorization_failed) for p in t.partitions
            ]
        else:
            parts = [_answer(ctx, t.topic, p) for p in t.partitions]
        topics.append({"topic": t.topic, "partitions": parts})
    return answered(_encode(call.version, call.corr, topics))


def _encode(version: int, corr: int, topics: list) -> bytes:
    body = {"throttle_time": 0, "topics": topics}
    return encode_response(OffsetForLeaderEpochRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    topics = [
        {"topic": t.topic, "partitions": [_entry(p.partition, code) for p in t.partitions]}
        for t in req.topics
    ]
    return _encode(version, corr, topics)


API = Api(
    OffsetForLeaderEpochRequest,
    (2, 4),
    handle,
    error_response,
    summary=(
        "leader epoch = Raft term; end offset from each partition's (term, first offset) "
        "rows; FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH / OFFSET_NOT_AVAILABLE as Kafka"
    ),
)
