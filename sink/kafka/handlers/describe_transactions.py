"""DescribeTransactions (KIP-664): the state of transactional ids. raftsink serves no
transactions (InitProducerId refuses transactional ids), so no id has any:
TRANSACTIONAL_ID_NOT_FOUND for each (Kafka's answer for an id its coordinator does not
know), TRANSACTIONAL_ID_AUTHORIZATION_FAILED for one the principal may not DESCRIBE
(checked here, per id, as Kafka does). The other fields as Kafka leaves them on an
error (its schema's defaults): state "", everything else 0.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

from sink.kafka.authorize import TXN, allowed
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import Operation

_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
"""The start time Kafka leaves on an error (0 ms)."""


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    states = [
        _state(
            tid,
            ErrorCode.transactional_id_not_found
            if allowed(ctx, call, Operation.DESCRIBE, TXN, tid)
            else ErrorCode.transactional_id_authorization_failed,
        )
        for tid in call.req.transactional_ids
    ]
    return answered(_encode(call.version, call.corr, states))


def _state(tid: str, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "transactional_id": tid,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": _EPOCH,
        "producer_id": 0,
        "producer_epoch": 0,
        "topics": [],
    }


def _encode(version: int, corr: int, states: list) -> bytes:
    body = {"throttle_time": 0, "transaction_states": states}
    return encode_response(DescribeTransactionsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    return _encode(version, corr, [_state(tid, code) for tid in req.transactional_ids])


API = Api(
    DescribeTransactionsRequest,
    (0, 0),
    handle,
    error_response,
    summary=(
        "no transactions are served: TRANSACTIONAL_ID_NOT_FOUND per id "
        "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED without DESCRIBE on it)"
    ),
)
