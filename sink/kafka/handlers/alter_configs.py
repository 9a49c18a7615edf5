"""AlterConfigs (v0-2): a topic's whole set of overrides, through the log.

Kafka's (non-incremental) semantics: the configs given become the topic's overrides;
every config not given returns to its default. Unknown names and bad values are
INVALID_CONFIG with the reason (nothing changes), validate_only checks without
changing. Broker resources are static here (the node configuration):
INVALID_REQUEST. A follower relays the request to the leader (admin clients send
it to any broker; Kafka forwards to its controller the same way).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.alter_configs.v2.request import AlterConfigsRequest

from sink.kafka.authorize import config_denial
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.topics.configs import TopicConfigError
from sink.topics.state import Op, apply_ops

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

Ops = list[tuple[int, str, str | None]]


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(run(ctx, call, incremental=False))


async def run(ctx: HandlerContext, call: Call, *, incremental: bool) -> bytes:
    """Shared with IncrementalAlterConfigs (the same response shape)."""
    req = call.req
    key = req.__api_key__
    # A relay runs as the relay user: relay only what this principal may alter in full.
    allowed_all = not any(config_denial(ctx, call, r, alter=True) for r in req.resources)
    relayed = await relay_to_controller(ctx, call, allowed=allowed_all)
    if relayed is not None:
        return relayed
    out = []
    for r in req.resources:
        ops: Ops = (
            [(int(c.config_operation), c.name, c.value) for c in r.configs]
            if incremental
            else [(Op.SET, c.name, c.value) for c in r.configs]
        )
        denied = config_denial(ctx, call, r, alter=True)
        if denied is not None:
            err, msg = denied, "ALTER_CONFIGS is not allowed"
        else:
            err, msg = await _alter_one(
                ctx, r, ops, replace=not incremental, validate_only=req.validate_only
            )
        out.append(
            {
                "error_code": err,
                "error_message": msg,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
        )
    return _encode(key, call.version, call.corr, out)


async def _alter_one(
    ctx: HandlerContext, r: Any, ops: Ops, *, replace: bool, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    admin = ctx.topic_configs
    if admin is None:
        return ErrorCode.unknown_server_error, "topic configs are not served here"
    if r.resource_type in (BROKER, BROKER_LOGGER):
        return (
            ErrorCode.invalid_request,
            "broker configs are static here (the node configuration's topics section)",
        )
    if r.resource_type != TOPIC:
        return ErrorCode.invalid_request, f"unknown resource type {r.resource_type}"
    current = admin.topic_configs(r.resource_name)
    if current is None:
        return ErrorCode.unknown_topic_or_partition, f"unknown topic {r.resource_name!r}"
    if not ctx.controller.is_leader():
        return ErrorCode.not_controller, "not the controller (Raft leader)"
    try:
        apply_ops(current, ops, replace)
    except TopicConfigError as exc:
        return ErrorCode.invalid_config, str(exc)
    if validate_only:
        return ErrorCode.none, None
    return await admin.alter_topic_configs(r.resource_name, ops, replace)


def _encode(key: int, version: int, corr: int, responses: list) -> bytes:
    body = {"throttle_time": 0, "responses": responses}
    return encode_response(key, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    responses = [
        {
            "error_code": code,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
        }
        for r in req.resources
    ]
    return _encode(req.__api_key__, version, corr, responses)


API = Api(
    AlterConfigsRequest,
    (0, 2),
    handle,
    error_response,
    summary=(
        "topic resources through the log (the given configs replace the overrides); "
        "validate_only; unknown names / bad values / cleanup.policy=compact INVALID_CONFIG; "
        "broker resources INVALID_REQUEST (static); a follower relays to the leader"
    ),
)
