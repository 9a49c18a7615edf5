"""SaslHandshake (v0-1): the client names its SASL mechanism (sink.security.sasl).

The answer lists the mechanisms the listener enables. An unknown or disabled one
is UNSUPPORTED_SASL_MECHANISM and the connection is closed after the answer, as
Kafka does. v1 is followed by SaslAuthenticate requests; v0 by raw SASL tokens
(length-prefixed bytes without a request header, which the connection state
machine hands to the session). On a listener without SASL, Kafka's answer:
ILLEGAL_SASL_STATE and no mechanisms.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    session = call.sasl
    if session is None:
        return answered(_encode(call.version, call.corr, ErrorCode.illegal_sasl_state, ()))
    code = session.handshake(call.req.mechanism, call.version)
    return answered(_encode(call.version, call.corr, ErrorCode(code), session.enabled))


def _encode(version: int, corr: int, code: ErrorCode, mechanisms: Any) -> bytes:
    body = {"error_code": code, "mechanisms": list(mechanisms)}
    return encode_response(SaslHandshakeRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return _encode(version, corr, code, ())


API = Api(
    SaslHandshakeRequest,
    (0, 1),
    handle,
    error_response,
    summary=(
        "PLAIN, SCRAM-SHA-256/512 as sasl.mechanisms enables; v0 then raw tokens; a "
        "disabled mechanism UNSUPPORTED_SASL_MECHANISM and the connection closed"
    ),
)
