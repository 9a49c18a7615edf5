"""CreatePartitions: grow a topic through the log, on the Raft leader (the
controller; a follower relays it there: sink.kafka.handlers.controller_relay). Fewer or as many partitions as the
topic has -> INVALID_PARTITIONS; more than kafka.max_create_partitions ->
INVALID_PARTITIONS; manual assignments are passed on: one group ignores them (every
node holds every partition), partition groups honour them once checked (else
INVALID_REPLICA_ASSIGNMENT; sink/node/grow_topic.py); validate_only checks without
changing anything. The topic id stays.

Authorization (as Kafka): ALTER on each topic; a topic the principal may not alter
answers TOPIC_AUTHORIZATION_FAILED and is not grown, the others are."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kio.schema.create_partitions.v3.request import CreatePartitionsRequest

from sink.kafka.authorize import topic_denied
from sink.kafka.handlers.api import Api, Call, Response, answer_by, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_create(ctx, call))


async def _create(ctx: HandlerContext, call: Call) -> bytes:
    """Every topic of the request at once (the controller still grows one topic at a
    time: PartitionRouting's lock); the waits for the new partitions' leaders overlap
    and end by the request's timeout, which the client waits by too."""
    denied = {t.name: topic_denied(ctx, call, Operation.ALTER, t.name) for t in call.req.topics}
    allowed = ctx.lifecycle is not None and not any(denied.values())
    relayed = await relay_to_controller(ctx, call, allowed=allowed, timeout=call.req.timeout)
    if relayed is not None:
        return relayed
    names = Counter(t.name for t in call.req.topics)
    settle_by = answer_by(call.req.timeout)
    out = await asyncio.gather(
        *(
            _grow(ctx, call, t, denied[t.name], names[t.name] > 1, settle_by)
            for t in call.req.topics
        )
    )
    return _encode(call.version, call.corr, list(out))


async def _grow(
    ctx: HandlerContext, call: Call, t: Any, denied: bool, duplicate: bool, settle_by: float
) -> dict:
    if duplicate:
        err, msg = ErrorCode.invalid_request, f"topic {t.name!r} named twice"
    elif denied:
        err, msg = ErrorCode.topic_authorization_failed, None
    elif ctx.lifecycle is None:
        err, msg = ErrorCode.unsupported_version, "partition creation is not served here"
    else:
        assignments = (
            None
            if t.assignments is None
            else [[int(b) for b in a.broker_ids] for a in t.assignments]
        )
        err, msg = await ctx.lifecycle.create_partitions(
            t.name, t.count, bool(call.req.validate_only), assignments, settle_by
        )
    return {"name": t.name, "error_code": err, "error_message": msg}


def _encode(version: int, corr: int, results: list) -> bytes:
    body = {"throttle_time": 0, "results": results}
    return encode_response(CreatePartitionsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    return _encode(
        version,
        corr,
        [{"name": t.name, "error_code": code, "error_message": None} for t in req.topics],
    )


API = Api(
    CreatePartitionsRequest,
    (0, 3),
    handle,
    error_response,
    summary=(
        "through the log on the leader (a follower relays it); fewer or equal -> "
        "INVALID_PARTITIONS; validate_only; assignments checked and honoured with partition "
        "groups, ignored in one group; topic id unchanged"
    ),
)
