"""IncrementalAlterConfigs (v0-1, KIP-339): SET / DELETE / APPEND / SUBTRACT on a topic's
overrides, through the log (applied on the overrides as they are at apply time, so
concurrent alters of different configs never undo each other). APPEND / SUBTRACT only
on list configs (cleanup.policy), else INVALID_CONFIG. The rest as AlterConfigs."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest

from sink.kafka.handlers import alter_configs
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(alter_configs.run(ctx, call, incremental=True))


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return alter_configs.error_response(version, corr, req, code)


API = Api(
    IncrementalAlterConfigsRequest,
    (0, 1),
    handle,
    error_response,
    summary=(
        "SET / DELETE / APPEND / SUBTRACT on topic configs through the log; validate_only; "
        "errors as AlterConfigs; a follower relays to the leader"
    ),
)
