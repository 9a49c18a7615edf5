"""FindCoordinator: groups (key_type 0) are placed by coordinator slot (Kafka's
partitionFor(group id), sink.groups.placement): the coordinator is the node hosting
the group's slot, today the Raft leader for every slot. Transactions (key_type 1)
name the Raft leader. v4+ answer per coordinator key (a batch)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode

# Coordinator key types: 0 = consumer group, 1 = transaction (v1+). Kafka answers any
# other with INVALID_REQUEST.
_KEY_TYPES = (0, 1)


Answer = tuple[ErrorCode, int, str, int]
_NONE_KNOWN: Answer = (ErrorCode.coordinator_not_available, -1, "", -1)


def _answer(ctx: HandlerContext, key_type: int, key: str) -> Answer:
    if key_type not in _KEY_TYPES:
        return (ErrorCode.invalid_request, -1, "", -1)
    if key_type == 0 and ctx.groups is not None:
        node = ctx.groups.coordinator_id(key)
        if node not in ctx.advertised.brokers:
            return _NONE_KNOWN
        host, port = ctx.advertised.brokers[node]
        return (ErrorCode.none, node, host, port)
    ep = ctx.leader_endpoint()
    return _NONE_KNOWN if ep is None else (ErrorCode.none, *ep)


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    key_type = getattr(req, "key_type", 0)
    if call.version >= 4:
        answers = [(k, _answer(ctx, key_type, k)) for k in req.coordinator_keys]
    else:
        answers = [(req.key, _answer(ctx, key_type, req.key))]
    return answered(_encode(call.version, call.corr, answers))


def _encode(version: int, corr: int, answers: list[tuple[str, Answer]]) -> bytes:
    if version >= 4:
        body: dict[str, Any] = {
            "throttle_time": 0,
            "coordinators": [
                {
                    "key": k,
                    "node_id": node,
                    "host": host,
                    "port": port,
                    "error_code": err,
                    "error_message": None,
                }
                for k, (err, node, host, port) in answers
            ],
        }
    else:
        err, node, host, port = answers[0][1]
        body = {
            "throttle_time": 0,
            "error_code": err,
            "error_message": None,
            "node_id": node,
            "host": host,
            "port": port,
        }
    return encode_response(FindCoordinatorRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if version >= 4:
        if req is None:
            return None
        return _encode(version, corr, [(k, (code, -1, "", -1)) for k in req.coordinator_keys])
    return _encode(version, corr, [("", (code, -1, "", -1))])


API = Api(
    FindCoordinatorRequest,
    (0, 4),
    handle,
    error_response,
    summary=(
        "groups: the node hosting the group's coordinator slot (today the Raft leader); "
        "transactions: the Raft leader; v4+ batched (needed by librdkafka to enable lz4)"
    ),
)
