"""ListPartitionReassignments (KIP-455): the replica moves not finished yet, from this
node's applied placement (any node answers; Kafka's controller answers it too): per
partition the replicas during the move (old and new together, as Kafka lists them), the
ones being added and the ones being removed. Topics null: every move; otherwise only the
named partitions that are moving. One group: nothing moves, the list is empty.

Authorization (as Kafka): DESCRIBE on the cluster, checked before the handler."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
)

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    wanted: set[tuple[str, int]] | None = None
    if call.req.topics is not None:
        wanted = {(t.name, int(p)) for t in call.req.topics for p in t.partition_indexes}
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in ctx.moves.pending() if ctx.moves is not None else []:
        if wanted is not None and (m["topic"], m["partition"]) not in wanted:
            continue
        replicas = m["replicas"] + [n for n in m["target"] if n not in m["replicas"]]
        by_topic[m["topic"]].append(
            {
                "partition_index": m["partition"],
                "replicas": replicas,
                "adding_replicas": m["adding"],
                "removing_replicas": m["removing"],
            }
        )
    topics = [{"name": name, "partitions": parts} for name, parts in sorted(by_topic.items())]
    return answered(_encode(call.version, call.corr, ErrorCode.none, topics))


def _encode(version: int, corr: int, code: ErrorCode, topics: list) -> bytes:
    body = {"throttle_time": 0, "error_code": code, "error_message": None, "topics": topics}
    return encode_response(ListPartitionReassignmentsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return _encode(version, corr, code, [])


API = Api(
    ListPartitionReassignmentsRequest,
    (0, 0),
    handle,
    error_response,
    summary="the moves not finished (replicas, adding, removing) from the applied placement",
)
