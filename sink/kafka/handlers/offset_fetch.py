"""OffsetFetch: the committed offsets as applied from the Raft log (offset_commit.py),
answered by the group's coordinator once it has applied its own term's entry (so
every offset acknowledged by an earlier coordinator is there): NOT_COORDINATOR /
COORDINATOR_LOAD_IN_PROGRESS otherwise (group_gate.py). A partition without a
committed offset answers offset -1, metadata "" and no error, as Kafka.

topics=null (v2+) asks for every partition the group committed. v5+ return the
committed leader epoch (KIP-320). v8+ ask for several groups at once (one answer and
one error code per group). v9's member id / epoch (KIP-848) are not checked (no
consumer-protocol groups); require_stable (v7+) needs nothing: no transactional
offsets are ever pending. v0 has v1's shape (it read ZooKeeper-stored offsets in old
brokers; Kafka 3.7 answers both from the same store, as this does).

Authorization (as Kafka): DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED, per
group from v8) and on each topic (a named one TOPIC_AUTHORIZATION_FAILED per partition;
left out of a topics=null answer)."""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from kio.schema.offset_fetch.v9.request import OffsetFetchRequest

from sink.kafka.authorize import allowed, topic_allowed
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.group_gate import coordinator_error
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation, ResourceType


def _topics(
    ctx: HandlerContext, call: Call, group: str, req_topics: Any, part_err: ErrorCode
) -> list:
    """As Kafka: topics the principal may not DESCRIBE are left out of an all-topics
    answer and TOPIC_AUTHORIZATION_FAILED (offset -1) where named."""

    def describable(name: str) -> bool:
        return topic_allowed(ctx, call, Operation.DESCRIBE, name)

    if req_topics is None:
        wanted: dict[str, list[int]] = {}
        for t, p in ctx.offsets.committed_partitions(group):
            if describable(t):
                wanted.setdefault(t, []).append(p)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in req_topics}
    topics = []
    for name, idxs in wanted.items():
        if not describable(name):
            denied = ErrorCode.topic_authorization_failed
            topics += _mirror([_Named(name, idxs)], denied)
            continue
        parts = []
        for i in idxs:
            c = ctx.offsets.committed_offset(group, name, i)
            parts.append(
                {
                    "partition_index": i,
                    "committed_offset": -1 if c is None else c.offset,
                    "committed_leader_epoch": -1 if c is None else c.leader_epoch,
                    "metadata": "" if c is None else c.metadata,
                    "error_code": part_err,
                }
            )
        topics.append({"name": name, "partitions": parts})
    return topics


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req, version = call.req, call.version
    if version >= 8:
        groups = []
        for g in req.groups:
            err = coordinator_error(ctx, g.group_id)
            if not _group_allowed(ctx, call, g.group_id):
                err = ErrorCode.group_authorization_failed
            topics = (
                _topics(ctx, call, g.group_id, g.topics, ErrorCode.none)
                if err == ErrorCode.none
                else _mirror(g.topics, ErrorCode.none)
            )
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": err})
        return answered(_encode(version, call.corr, {"groups": groups}))
    err = coordinator_error(ctx, req.group_id)
    if not _group_allowed(ctx, call, req.group_id):
        err = ErrorCode.group_authorization_failed
    if err != ErrorCode.none:
        return answered(error_response(version, call.corr, req, err))
    topics = _topics(ctx, call, req.group_id, req.topics, ErrorCode.none)
    return answered(_encode(version, call.corr, {"topics": topics, "error_code": err}))


class _Named(NamedTuple):
    name: str
    partition_indexes: list[int]


def _group_allowed(ctx: HandlerContext, call: Call, group: str) -> bool:
    return allowed(ctx, call, Operation.DESCRIBE, ResourceType.GROUP, group)


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
    (0, 9),
    handle,
    error_response,
    summary=(
        "the applied offsets on the coordinator; committed leader epoch v5+; v8+ several "
        "groups per request; topics null: every committed partition"
    ),
)
