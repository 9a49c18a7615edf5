"""SaslAuthenticate (v0-2): one SASL token of the exchange the handshake chose.

The connection's session (sink.security.sasl) checks it: PLAIN in one step, SCRAM
in two (server-first, then server-final with the server's signature). A failure is
SASL_AUTHENTICATION_FAILED with Kafka's message (naming no user), then the
connection is closed, as Kafka does. v1+ carries session_lifetime_ms (KIP-368,
sasl.session_lifetime_ms; 0: none). On a listener without SASL: ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.sasl import PLAIN


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    session = call.sasl
    if session is None:
        why = "SaslAuthenticate on a listener without SASL"
        return answered(_encode(call.version, call.corr, ErrorCode.illegal_sasl_state, why))
    token = bytes(call.req.auth_bytes)
    if session.mechanism == PLAIN:
        # PLAIN runs PBKDF2 (sasl.iterations: ~10 ms for SHA-512) to check the password:
        # off the event loop, so a burst of logins does not stall the node's other
        # connections. Awaited here (the dispatch step), so this connection reads no
        # further request until the session has its outcome.
        step = await asyncio.to_thread(session.authenticate, token, call.version)
    else:  # SCRAM's server side is a few HMACs
        step = session.authenticate(token, call.version)
    return answered(
        _encode(
            call.version,
            call.corr,
            ErrorCode(step.error),
            step.message,
            step.challenge,
            step.session_lifetime_ms,
        )
    )


def _encode(
    version: int,
    corr: int,
    code: ErrorCode,
    message: str | None,
    challenge: bytes = b"",
    lifetime_ms: int = 0,
) -> bytes:
    body = {
        "error_code": code,
        "error_message": message,
        "auth_bytes": challenge,
        "session_lifetime": lifetime_ms,
    }
    return encode_response(SaslAuthenticateRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return _encode(version, corr, code, None)


API = Api(
    SaslAuthenticateRequest,
    (0, 2),
    handle,
    error_response,
    summary=(
        "PLAIN / SCRAM tokens; a failure SASL_AUTHENTICATION_FAILED then the connection "
        "closed; v1+ session_lifetime_ms (KIP-368 re-authentication)"
    ),
)
