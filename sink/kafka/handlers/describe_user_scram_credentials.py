"""DescribeUserScramCredentials (v0, KIP-554): users' SCRAM mechanisms and iteration
counts (never salts or keys), from the applied state of the node asked.

users null or empty: every user. A named user without credentials is
RESOURCE_NOT_FOUND, a name given twice DUPLICATE_RESOURCE, as Kafka answers.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
)

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.controller_relay import read_point
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.scram import MECHANISM_TYPES


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    if ctx.users is None:
        return answered(
            _encode(call.corr, ErrorCode.unknown_server_error, "no user store on this node", [])
        )
    await read_point(ctx)  # the controller's writes before this describe
    known = dict(ctx.users.describe_users())
    wanted = [u.name for u in call.req.users or ()]
    results = []
    if not wanted:
        results = [(u, ErrorCode.none, None, mechs) for u, mechs in sorted(known.items())]
    counts = Counter(wanted)
    for name in dict.fromkeys(wanted):  # each name once, in request order
        if counts[name] > 1:
            results.append((name, ErrorCode.duplicate_resource, "user named twice", []))
        elif name not in known:
            results.append((name, ErrorCode.resource_not_found, "no SCRAM credentials", []))
        else:
            results.append((name, ErrorCode.none, None, known[name]))
    return answered(_encode(call.corr, ErrorCode.none, None, results))


def _encode(corr: int, code: ErrorCode, message: str | None, results: list) -> bytes:
    body = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "results": [
            {
                "user": user,
                "error_code": err,
                "error_message": msg,
                "credential_infos": [
                    {"mechanism": MECHANISM_TYPES[m], "iterations": it} for m, it in mechs
                ],
            }
            for user, err, msg, mechs in results
        ],
    }
    return encode_response(DescribeUserScramCredentialsRequest.__api_key__, 0, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes:
    return _encode(corr, code, None, [])


API = Api(
    DescribeUserScramCredentialsRequest,
    (0, 0),
    handle,
    error_response,
    summary="mechanisms and iterations of SASL users from the applied state (no salts or keys)",
)
