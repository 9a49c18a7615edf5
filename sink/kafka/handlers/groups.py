"""OffsetCommit / OffsetFetch, minimal: offsets kept in memory on the coordinator.

The coordinator of every group is the Raft leader (FindCoordinator). Offsets
are NOT replicated: they are lost on failover or restart (consumers then fall
back to auto.offset.reset). No group membership (JoinGroup etc.) is served.
"""

from __future__ import annotations

from typing import Any

from sink.kafka import errors as E
from sink.kafka.build import encode_response
from sink.kafka.handlers.context import HandlerContext

OFFSET_COMMIT = 8
OFFSET_FETCH = 9


async def handle_offset_commit(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> bytes:
    svc = ctx.service
    err = E.NONE if svc.is_leader() else E.NOT_COORDINATOR
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if err == E.NONE:
                svc.group_offsets[(req.group_id, t.name, p.partition_index)] = (
                    p.committed_offset,
                    p.committed_metadata,
                )
            parts.append({"partition_index": p.partition_index, "error_code": err})
        topics.append({"name": t.name, "partitions": parts})
    return encode_response(OFFSET_COMMIT, version, corr, {"throttle_time": 0, "topics": topics})


async def handle_offset_fetch(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> bytes:
    svc = ctx.service
    err = E.NONE if svc.is_leader() else E.NOT_COORDINATOR
    offsets = svc.group_offsets
    if req.topics is None:
        wanted: dict[str, list[int]] = {}
        for g, t, p in offsets:
            if g == req.group_id:
                wanted.setdefault(t, []).append(p)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in req.topics}
    topics = []
    for name, idxs in wanted.items():
        parts = []
        for i in idxs:
            off, meta = offsets.get((req.group_id, name, i), (-1, ""))
            parts.append(
                {
                    "partition_index": i,
                    "committed_offset": off,
                    "committed_leader_epoch": -1,
                    "metadata": meta,
                    "error_code": err if version < 2 else E.NONE,
                }
            )
        topics.append({"name": name, "partitions": parts})
    body = {"throttle_time": 0, "topics": topics, "error_code": err}
    return encode_response(OFFSET_FETCH, version, corr, body)


def offset_commit_error_response(version: int, corr: int, req: Any, code: int) -> bytes | None:
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
    return encode_response(OFFSET_COMMIT, version, corr, {"throttle_time": 0, "topics": topics})


def offset_fetch_error_response(version: int, corr: int, req: Any, code: int) -> bytes | None:
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
    body = {"throttle_time": 0, "topics": topics, "error_code": code}
    return encode_response(OFFSET_FETCH, version, corr, body)
