"""OffsetFetch, minimal: the offsets OffsetCommit kept in memory on the
coordinator (see offset_commit.py). topics=null (v2+) asks for every partition
the group committed. v8+ ask for several groups at once (one answer per group)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.offset_fetch.v9.request import OffsetFetchRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


def _topics(ctx: HandlerContext, group: str, req_topics: Any, part_err: ErrorCode) -> list:
    if req_topics is None:
        wanted: dict[str, list[int]] = {}
        for t, p in ctx.offsets.committed_partitions(group):
            wanted.setdefault(t, []).append(p)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in req_topics}
    topics = []
    for name, idxs in wanted.items():
        parts = []
        for i in idxs:
            off, meta = ctx.offsets.committed_offset(group, name, i) or (-1, "")
            parts.append(
                {
                    "partition_index": i,
                    "committed_offset": off,
                    "committed_leader_epoch": -1,
                    "metadata": meta,
                    "error_code": part_err,
                }
            )
        topics.append({"name": name, "partitions": parts})
    return topics


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req, version = call.req, call.version
    err = ErrorCode.none if ctx.leadership.is_leader() else ErrorCode.not_coordinator
    if version >= 8:
        groups = [
            {
                "group_id": g.group_id,
                "topics": _topics(ctx, g.group_id, g.topics, ErrorCode.none),
                "error_code": err,
            }
            for g in req.groups
        ]
        return answered(_encode(version, call.corr, {"groups": groups}))
    # v0-1 carry the error per partition only; v2+ also (and only) at the top.
    part_err = err if version < 2 else ErrorCode.none
    topics = _topics(ctx, req.group_id, req.topics, part_err)
    return answered(_encode(version, call.corr, {"topics": topics, "error_code": err}))


def _encode(version: int, corr: int, body: dict) -> bytes:
    return encode_response(
        OffsetFetchRequest.__api_key__, version, corr, {"throttle_time": 0} | body
    )


def _mirror(req_topics: Any, code: ErrorCode) -> list:
    return [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": i,
                    "committed_offset": -1,
                    "committed_leader_epoch": -1,
                    "metadata": None,
                    "error_code": code,
                }
                for i in t.partition_indexes
            ],
        }
        for t in req_topics or ()
    ]


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    """v2-v7 carry a top-level error code, v8+ one per group; v0-1 only per-partition ones."""
    if version >= 8:
        if req is None:
            return None
        groups = [
            {"group_id": g.group_id, "topics": _mirror(g.topics, code), "error_code": code}
            for g in req.groups
        ]
        return _encode(version, corr, {"groups": groups})
    if req is None and version < 2:
        return None
    topics = _mirror(req.topics if req is not None else None, code)
    return _encode(version, corr, {"topics": topics, "error_code": code})


API = Api(
    OffsetFetchRequest,
    (1, 9),
    handle,
    error_response,
    summary="same store; v8+ several groups per request",
)
