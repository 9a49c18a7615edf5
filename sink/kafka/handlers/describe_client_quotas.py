"""DescribeClientQuotas (v0-1, KIP-546): the applied client quota configuration of this
node, filtered as Kafka filters it (sink.quotas.QuotaTable.describe). Any node answers
from its applied state (a follower may lag the controller by the commit in flight)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.controller_relay import read_point
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.quotas import QuotaError


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    if ctx.quota_admin is None:
        return answered(
            error_response(call.version, call.corr, req, ErrorCode.unknown_server_error)
        )
    await read_point(ctx)  # the controller's writes before this describe
    components = [(c.entity_type, int(c.match_type), c.match) for c in req.components]
    try:
        found = ctx.quota_admin.client_quotas().describe(components, bool(req.strict))
    except QuotaError as exc:
        return answered(_encode(call.version, call.corr, ErrorCode.invalid_request, str(exc), None))
    entries = [
        {
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
            "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
        }
        for entity, values in found
    ]
    return answered(_encode(call.version, call.corr, ErrorCode.none, None, entries))


def _encode(
    version: int, corr: int, code: ErrorCode, message: str | None, entries: list | None
) -> bytes:
    body = {"throttle_time": 0, "error_code": code, "error_message": message, "entries": entries}
    return encode_response(DescribeClientQuotasRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return _encode(version, corr, code, None, None)


API = Api(
    DescribeClientQuotasRequest,
    (0, 1),
    handle,
    error_response,
    summary=(
        "client quotas (user / client-id entities, KIP-546 filters) from the applied state "
        "of the node asked"
    ),
)
