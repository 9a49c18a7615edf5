"""ListOffsets: -1 latest (high watermark), -2 / -4 earliest (log start), -3 the
record with the largest timestamp (KIP-734: its offset and timestamp), any other
timestamp the first retained record whose timestamp is >= it (KIP-79: its exact
offset and timestamp, leader_epoch the term of the entry holding it; offset -1 and
timestamp -1 when no record is that late). Lookups use the partition's time index
and decode one batch (sink/state/time_lookup.py); LogAppendTime topics compare the
append time stored in the batch header. A time before the log start answers the
first retained record. -5 (latest tiered, v9+, KIP-1005) and -6 (earliest pending
upload, v11+, KIP-1023) answer offset -1, timestamp -1, leader_epoch -1, as Kafka
answers them for a topic without tiered storage: raftsink tiers nothing. v10's
timeout (for reads from remote storage) has nothing to wait for and is ignored.

v0 (pre-KIP-79) answers an array, old_style_offsets, of at most max_num_offsets
offsets, newest first: Kafka lists the log end and then the base offsets of the
segments older than the timestamp. raftsink has one notional segment starting at
the log start, so: latest -> [high watermark, log start] (the start only when it
differs), earliest -> [log start], a real timestamp -> [] (v0's segment semantics
are not modelled); each cut to max_num_offsets (0 or less -> []).

Answered per partition by the ready leader of the group that owns it
(PartitionRoles.role); v4+ current_leader_epoch is checked against that group's
term (FENCED_LEADER_EPOCH older, UNKNOWN_LEADER_EPOCH newer), as Kafka's leader does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.list_offsets.v11.request import ListOffsetsRequest

from sink.kafka.authorize import topic_allowed
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext, PartitionRole
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode, OffsetOutOfRange
from sink.kafka.protocol.records import BatchError
from sink.security.acl import Operation

log = logging.getLogger("sink.kafka")
_SPECIAL = (-1, -2, -4)
_TIERED = (-5, -6)
"""Latest tiered (KIP-1005) and earliest pending upload (KIP-1023): nothing is tiered."""


def _leader_error(role: PartitionRole) -> ErrorCode:
    """May this node answer for the partition (none: yes)? Only its group's ready leader
    may: a follower (or a node hosting no replica) NOT_LEADER_OR_FOLLOWER, a new leader
    before its own-term entry is applied LEADER_NOT_AVAILABLE (retriable)."""
    if not role.leads:
        return ErrorCode.not_leader_or_follower
    if not role.ready:
        return ErrorCode.leader_not_available
    return ErrorCode.none


def _epoch_error(role: PartitionRole, client_epoch: int) -> ErrorCode:
    """v4+ current_leader_epoch against the group's term, as Kafka's leader checks it:
    older FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (-1: not checked)."""
    if client_epoch < 0 or client_epoch == role.leader_epoch:
        return ErrorCode.none
    if client_epoch < role.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    fsm = ctx.partitions
    topics = []
    for t in call.req.topics:
        parts = []
        for p in t.partitions:
            role = ctx.role(t.name, p.partition_index)
            client_epoch = getattr(p, "current_leader_epoch", -1)
            entry = _entry(p.partition_index, _leader_error(role))
            if not fsm.has_partition(t.name, p.partition_index) and topic_allowed(
                ctx, call, Operation.DESCRIBE, t.name
            ):
                # Kafka's answer on every broker; with partition groups no node leads a
                # partition that does not exist, so the leader check would say NOT_LEADER.
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            if entry["error_code"] != ErrorCode.none:
                parts.append(entry)
                continue
            epoch = role.leader_epoch
            if not topic_allowed(ctx, call, Operation.DESCRIBE, t.name):
                entry["error_code"] = ErrorCode.topic_authorization_failed
            elif not fsm.has_partition(t.name, p.partition_index):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            elif (fenced := _epoch_error(role, client_epoch)) != ErrorCode.none:
                entry["error_code"] = fenced
            else:
                hw = fsm.high_watermark(t.name, p.partition_index)
                start = fsm.log_start_offset(t.name, p.partition_index)
                ts = p.timestamp
                if ts == -1:
                    entry.update(offset=hw, leader_epoch=epoch)
                elif ts in (-2, -4):
                    entry.update(offset=start, leader_epoch=epoch)
                elif ts in _TIERED:
                    pass  # the entry's -1 / -1 / -1: no tiered storage
                elif call.version > 0:
                    entry.update(_by_time(fsm, t.name, p.partition_index, ts))
                if call.version == 0:
                    entry["old_style_offsets"] = _old_style(ts, hw, start, p.max_num_offsets)
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return answered(_encode(call.version, call.corr, topics))


def _by_time(fsm: Any, topic: str, partition: int, ts: int) -> dict[str, Any]:
    """offset/timestamp/leader_epoch of a lookup by time (-3: the largest timestamp)."""
    try:
        match = fsm.offset_for_timestamp(topic, partition, ts)
    except OffsetOutOfRange:  # compacted under the lookup: the client asks again
        return {"error_code": ErrorCode.offset_not_available}
    except BatchError as exc:  # a stored batch that cannot be decoded: say so, loudly
        log.error("kafka.list_offsets %s-%d ts=%d: %s", topic, partition, ts, exc)
        return {"error_code": ErrorCode.kafka_storage_error}
    if match is None:
        return {"offset": -1, "timestamp": -1, "leader_epoch": -1}
    return {
        "offset": match.offset,
        "timestamp": match.timestamp,
        "leader_epoch": match.leader_epoch,
    }


def _old_style(ts: int, hw: int, start: int, max_num: int) -> list[int]:
    """v0's answer: offsets newest first, at most max_num of them."""
    if ts == -1:
        offsets = [hw, start] if hw != start else [hw]
    elif ts == -2:
        offsets = [start]
    else:
        offsets = []
    return offsets[: max(max_num, 0)]


def _entry(index: int, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
        "old_style_offsets": [],
    }


def _encode(version: int, corr: int, topics: list) -> bytes:
    body = {"throttle_time": 0, "topics": topics}
    return encode_response(ListOffsetsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    topics = [
        {"name": t.name, "partitions": [_entry(p.partition_index, code) for p in t.partitions]}
        for t in req.topics
    ]
    return _encode(version, corr, topics)


API = Api(
    ListOffsetsRequest,
    (0, 11),
    handle,
    error_response,
    summary=(
        "-1 latest (high watermark), -2/-4 earliest, -3 the record with the largest "
        "timestamp, -5/-6 (tiered) -1; a real timestamp: the exact first record at or after it (time index + "
        "one decoded batch), -1/-1 when none; v0 answers old_style_offsets: latest [high "
        "watermark, log start], earliest [log start], cut to max_num_offsets; per partition "
        "on its group's leader, current_leader_epoch checked (FENCED/UNKNOWN_LEADER_EPOCH)"
    ),
)
