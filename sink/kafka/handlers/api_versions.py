"""ApiVersions: the versions served (ctx.supported, the registry's). kio writes
response header v0 for every version, as Kafka does. A version above the ones
served is answered by the connection before parsing (Kafka's fallback:
UNSUPPORTED_VERSION in a v0 body listing our APIs, see encode_api_versions)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode

API_VERSIONS_KEY = int(ApiVersionsRequest.__api_key__)


def encode_api_versions(
    version: int,
    corr: int,
    supported: Mapping[int, tuple[int, int]],
    error: ErrorCode = ErrorCode.none,
) -> bytes:
    body = {
        "error_code": error,
        "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(supported.items())
        ],
        "throttle_time": 0,
    }
    return encode_response(API_VERSIONS_KEY, version, corr, body)


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return answered(encode_api_versions(call.version, call.corr, ctx.supported))


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return encode_api_versions(version, corr, {}, code)


API = Api(
    ApiVersionsRequest,
    (0, 4),
    handle,
    error_response,
    summary=(
        "response header v0 always; an unsupported version gets UNSUPPORTED_VERSION in a "
        "v0 body with the API list"
    ),
)
