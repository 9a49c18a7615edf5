"""AlterClientQuotas (v0-1, KIP-546): client quota changes through the Raft log.

Each entry is validated on its own (entity types user / client-id, keys
producer_byte_rate / consumer_byte_rate / request_percentage, positive values;
anything else is INVALID_REQUEST with the reason); the valid ones are proposed as
ONE log entry, so they apply together. validate_only stops after validation. Only
the controller (the Raft leader) writes: another node relays the request there
(sink.kafka.handlers.controller_relay) and answers every entry NOT_CONTROLLER only
when it knows no controller or cannot reach it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest

from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.quotas import Alteration, QuotaError, alteration_of, entity_of


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_alter(ctx, call))


async def _alter(ctx: HandlerContext, call: Call) -> bytes:
    req = call.req
    if ctx.quota_admin is not None:
        relayed = await relay_to_controller(ctx, call)
        if relayed is not None:
            return relayed
    if ctx.quota_admin is None or not ctx.controller.is_leader():
        why = "not the controller (Raft leader)"
        return _encode(
            call.version,
            call.corr,
            [(entry.entity, ErrorCode.not_controller, why) for entry in req.entries],
        )
    results: list[tuple[Any, ErrorCode, str | None]] = []
    valid: list[tuple[int, Alteration]] = []
    for i, entry in enumerate(req.entries):
        try:
            entity = entity_of((e.entity_type, e.entity_name) for e in entry.entity)
            ops = [(op.key, float(op.value), bool(op.remove)) for op in entry.ops]
            valid.append((i, alteration_of(entity, ops)))
            results.append((entry.entity, ErrorCode.none, None))
        except QuotaError as exc:
            results.append((entry.entity, ErrorCode.invalid_request, str(exc)))
    if valid and not req.validate_only:
        code = await ctx.quota_admin.alter_client_quotas([a for _, a in valid])
        if code != ErrorCode.none:
            why = f"quota change failed ({code.name})"
            for i, _ in valid:
                results[i] = (results[i][0], code, why)
    return _encode(call.version, call.corr, results)


def _encode(version: int, corr: int, results: list[tuple[Any, ErrorCode, str | None]]) -> bytes:
    entries = [
        {
            "error_code": code,
            "error_message": message,
            "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in ent],
        }
        for ent, code, message in results
    ]
    body = {"throttle_time": 0, "entries": entries}
    return encode_response(AlterClientQuotasRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    return _encode(version, corr, [(entry.entity, code, None) for entry in req.entries])


API = Api(
    AlterClientQuotasRequest,
    (0, 1),
    handle,
    error_response,
    summary=(
        "through the log, on the controller (Raft leader; another node relays it); "
        "validate_only; unknown keys / entity types INVALID_REQUEST with the reason"
    ),
)
