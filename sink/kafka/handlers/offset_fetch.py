"""OffsetFetch, minimal: the offsets OffsetCommit kept in memory on the
coordinator (see offset_commit.py). topics=null (v2+) asks for every partition
the group committed."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.offset_fetch.v7.request import OffsetFetchRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req, version = call.req, call.version
    err = ErrorCode.none if ctx.leadership.is_leader() else ErrorCode.not_coordinator
    if req.topics is None:
        wanted: dict[str, list[int]] = {}
        for t, p in ctx.offsets.committed_partitions(req.group_id):
            wanted.setdefault(t, []).append(p)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in req.topics}
    topics = []
    for name, idxs in wanted.items():
        parts = []
        for i in idxs:
            off, meta = ctx.offsets.committed_offset(req.group_id, name, i) or (-1, "")
            parts.append(
                {
                    "partition_index": i,
                    "committed_offset": off,
                    "committed_leader_epoch": -1,
                    "metadata": meta,
                    "error_code": err if version < 2 else ErrorCode.none,
                }
            )
        topics.append({"name": name, "partitions": parts})
    return answered(_encode(version, call.corr, topics, err))


def _encode(version: int, corr: int, topics: list, err: ErrorCode) -> bytes:
    body = {"throttle_time": 0, "topics": topics, "error_code": err}
    return encode_response(OffsetFetchRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    """v2+ carry a top-level error code; v0-1 only per-partition ones."""
    if req is None and version < 2:
        return None
    topics = []
    for t in (req.topics if req is not None else None) or ():
        parts = [
            {
                "partition_index": i,
                "committed_offset": -1,
                "committed_leader_epoch": -1,
                "metadata": None,
                "error_code": code,
            }
            for i in t.partition_indexes
        ]
        topics.append({"name": t.name, "partitions": parts})
    return _encode(version, corr, topics, code)


API = Api(OffsetFetchRequest, (1, 7), handle, error_response)
