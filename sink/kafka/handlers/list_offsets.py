"""ListOffsets: -1 latest (high watermark), -2 / -4 earliest, -3 max timestamp
(approximated by the last offset, timestamp -1). Lookup by a real timestamp is
not supported: answered with offset -1 (no such record)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.list_offsets.v8.request import ListOffsetsRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    lead, fsm = ctx.leadership, ctx.partitions
    if not lead.is_leader():
        err_all = ErrorCode.not_leader_or_follower
    elif not lead.leader_ready():
        err_all = ErrorCode.leader_not_available
    else:
        err_all = ErrorCode.none
    epoch = lead.leader_epoch()
    topics = []
    for t in call.req.topics:
        parts = []
        for p in t.partitions:
            entry = _entry(p.partition_index, err_all)
            if err_all != ErrorCode.none:
                parts.append(entry)
                continue
            if not fsm.has_partition(t.name, p.partition_index):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                hw = fsm.high_watermark(t.name, p.partition_index)
                start = fsm.log_start_offset(t.name, p.partition_index)
                ts = p.timestamp
                if ts == -1:
                    off = hw
                elif ts in (-2, -4):
                    off = start
                elif ts == -3:
                    off = hw - 1 if hw > start else -1
                else:
                    off = -1
                entry.update(offset=off, leader_epoch=epoch)
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return answered(_encode(call.version, call.corr, topics))


def _entry(index: int, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
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
    (1, 8),
    handle,
    error_response,
    summary=(
        "-1 latest (high watermark), -2/-4 earliest, -3 last offset; lookup by a real "
        "timestamp answers offset -1 (not supported)"
    ),
)
