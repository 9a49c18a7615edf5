"""FindCoordinator: the Raft leader coordinates every group (OffsetCommit /
OffsetFetch); v4+ answer per coordinator key."""

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


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    ep = ctx.leader_endpoint()
    if getattr(call.req, "key_type", 0) not in _KEY_TYPES:
        answer: tuple[ErrorCode, int, str, int] = (ErrorCode.invalid_request, -1, "", -1)
    elif ep is None:
        answer = (ErrorCode.coordinator_not_available, -1, "", -1)
    else:
        answer = (ErrorCode.none, *ep)
    return answered(_encode(call.version, call.corr, call.req, *answer))


def _encode(
    version: int, corr: int, req: Any, err: ErrorCode, node: int, host: str, port: int
) -> bytes:
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
                for k in req.coordinator_keys
            ],
        }
    else:
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
    if version >= 4 and req is None:
        return None
    return _encode(version, corr, req, code, -1, "", -1)


API = Api(
    FindCoordinatorRequest,
    (0, 4),
    handle,
    error_response,
    summary="always the Raft leader (needed by librdkafka to enable lz4)",
)
