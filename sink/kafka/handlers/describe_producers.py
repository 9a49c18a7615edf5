"""DescribeProducers (KIP-664): the idempotent producers a partition holds state for
(producer id, epoch, last sequence), answered by the partition leader (the leader
of the Raft group that owns it, PartitionRoles.role; a follower or a node hosting no
replica answers NOT_LEADER_OR_FOLLOWER). No transactions are served, so
coordinator_epoch and current_txn_start_offset are -1; last_timestamp is -1 (the
state machine keeps log positions, not times). Expired producers
(producers.id_expiration_ms) are not listed.

Authorization (as Kafka): READ on each topic; a topic the principal may not read
answers TOPIC_AUTHORIZATION_FAILED for each of its partitions, the others are
described."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.describe_producers.v0.request import DescribeProducersRequest

from sink.kafka.authorize import topic_denied
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    topics = []
    for t in call.req.topics:
        parts = []
        denied = topic_denied(ctx, call, Operation.READ, t.name)
        for p in t.partition_indexes:
            if denied:
                parts.append(_part(p, ErrorCode.topic_authorization_failed))
            elif ctx.lifecycle is None:
                parts.append(_part(p, ErrorCode.unsupported_version))
            elif not ctx.partitions.has_partition(t.name, p):
                parts.append(_part(p, ErrorCode.unknown_topic_or_partition))
            elif not ctx.role(t.name, p).leads:  # the partition's group leader answers
                parts.append(_part(p, ErrorCode.not_leader_or_follower))
            else:
                producers = [
                    {
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "last_sequence": last,
                        "last_timestamp": -1,
                        "coordinator_epoch": -1,
                        "current_txn_start_offset": -1,
                    }
                    for pid, epoch, last in ctx.lifecycle.active_producers(t.name, p)
                ]
                parts.append(_part(p, ErrorCode.none, producers))
        topics.append({"name": t.name, "partitions": parts})
    return answered(_encode(call.version, call.corr, topics))


def _part(index: int, code: ErrorCode, producers: list | None = None) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "error_message": None,
        "active_producers": producers or [],
    }


def _encode(version: int, corr: int, topics: list) -> bytes:
    body = {"throttle_time": 0, "topics": topics}
    return encode_response(DescribeProducersRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    topics = [
        {"name": t.name, "partitions": [_part(p, code) for p in t.partition_indexes]}
        for t in req.topics
    ]
    return _encode(version, corr, topics)


API = Api(
    DescribeProducersRequest,
    (0, 0),
    handle,
    error_response,
    summary=(
        "idempotent producers with state per partition (id, epoch, last sequence) on the "
        "leader; no transactions (-1 fields); expired producers not listed"
    ),
)
