"""OffsetCommit: committed offsets through the Raft log (sink.offsets), answered
only once the entry is committed and applied, so an acknowledged commit survives a
leader change. Stored per (group, topic, partition): offset, committed leader epoch
(v6+, returned by OffsetFetch v5+), metadata, commit time (and v2-v4's explicit expiry).

Checks, in Kafka's order (KafkaApis.handleOffsetCommitRequest, GroupCoordinator):
the coordinator gate (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS, every partition);
the group coordinator's verdict on generation / member id / group instance id (v1+;
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, ... every partition; simple commits with
generation -1 pass for groups without members); then per partition
UNKNOWN_TOPIC_OR_PARTITION (nothing stored) and OFFSET_METADATA_TOO_LARGE (metadata
above offsets.metadata_max_bytes). A write that fails answers NOT_COORDINATOR
(leadership lost) or COORDINATOR_NOT_AVAILABLE (not committed in time), as Kafka.

v0-1 (Sarama's offset manager at its default version sends v1) are served like v2+;
v1's per-partition commit_timestamp is stored as the commit time when not -1.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.offset_commit.v9.request import OffsetCommitRequest

from sink.kafka.authorize import topic_allowed
from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.group_gate import coordinator_error
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    err = coordinator_error(ctx, req.group_id)
    if err == ErrorCode.none:
        err = ctx.offsets.membership.check_commit(
            req.group_id,
            getattr(req, "generation_id_or_member_epoch", -1),
            getattr(req, "member_id", ""),
            getattr(req, "group_instance_id", None),
        )
    if err != ErrorCode.none:
        return answered(error_response(call.version, call.corr, req, err))
    return later(_commit(ctx, call))


async def _commit(ctx: HandlerContext, call: Call) -> bytes:
    req = call.req
    fsm = ctx.partitions
    max_md = ctx.offsets.metadata_max_bytes
    codes: dict[tuple[str, int], ErrorCode] = {}
    items = []
    for t in req.topics:
        for p in t.partitions:
            md = p.committed_metadata
            if not topic_allowed(ctx, call, Operation.READ, t.name):
                codes[(t.name, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif not fsm.has_partition(t.name, p.partition_index):
                codes[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            elif md is not None and len(md.encode()) > max_md:
                codes[(t.name, p.partition_index)] = ErrorCode.offset_metadata_too_large
            else:
                items.append(
                    (
                        t.name,
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1),
                        md,
                        getattr(p, "commit_timestamp", -1),
                        -1,
                    )
                )
    if items:
        res = await ctx.offsets.commit_offsets(req.group_id, items, _retention_ms(req))
        for i, it in enumerate(items):
            codes[(it[0], it[1])] = res if isinstance(res, ErrorCode) else res[i]
    topics = [
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
    return _encode(call.version, call.corr, topics)


def _retention_ms(req: Any) -> int:
    """v2-v4's retention_time (kio: a timedelta); -1 (the broker's retention) otherwise."""
    retention = getattr(req, "retention_time", None)
    if retention is None:
        return -1
    ms = round(retention.total_seconds() * 1000)
    return ms if ms >= 0 else -1


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
    (0, 9),
    handle,
    error_response,
    summary=(
        "through the Raft log, answered once applied (survives failover); committed leader "
        "epoch (v6+) and metadata stored; generation/member checked by the group coordinator; "
        "OFFSET_METADATA_TOO_LARGE above offsets.metadata_max_bytes"
    ),
)
