"""ListTransactions (KIP-664; v1 KIP-994's duration filter; v2 KIP-1152's transactional id
pattern): the transactions this node coordinates. raftsink serves no transactions
(InitProducerId refuses transactional ids), so the list is empty, with the filters
checked as Kafka checks them: a state filter Kafka does not know is echoed in
unknown_state_filters, and a transactional id pattern that is not a regular expression
answers INVALID_REGULAR_EXPRESSION. Kafka's admin tools (`kafka-transactions.sh list`,
kafka-python's `transactions list`, Flink's FLIP-511 clean-up) then find nothing to do
rather than failing on an unsupported API.

Authorization (as Kafka): the listed transactions are filtered by DESCRIBE on each
transactional id; there are none, so nothing is checked."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from kio.schema.list_transactions.v2.request import ListTransactionsRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode

STATES = frozenset(
    {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    }
)
"""Kafka's transaction states (TransactionState.java): the state filters it knows."""


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    pattern = getattr(req, "transactional_id_pattern", None)
    if pattern:
        try:
            re.compile(pattern)
        except re.error:
            return answered(_encode(call.version, call.corr, ErrorCode.invalid_regular_expression))
    unknown = [s for s in req.state_filters if s not in STATES]
    return answered(_encode(call.version, call.corr, ErrorCode.none, unknown))


def _encode(version: int, corr: int, code: ErrorCode, unknown: list[str] | None = None) -> bytes:
    body = {
        "throttle_time": 0,
        "error_code": code,
        "unknown_state_filters": unknown or [],
        "transaction_states": [],
    }
    return encode_response(ListTransactionsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return _encode(version, corr, code)


API = Api(
    ListTransactionsRequest,
    (0, 2),
    handle,
    error_response,
    summary=(
        "no transactions are served: an empty list (unknown state filters echoed; a "
        "pattern that is not a regular expression INVALID_REGULAR_EXPRESSION)"
    ),
)
