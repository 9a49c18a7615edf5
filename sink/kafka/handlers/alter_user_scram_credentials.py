"""AlterUserScramCredentials (v0, KIP-554): SCRAM credentials created, changed and
deleted through the Raft log, on the controller (Raft leader) only; another node
relays the request there (sink.kafka.handlers.controller_relay) and answers every user
NOT_CONTROLLER only when it knows no controller or cannot reach it.

The client salts: an upsertion carries salt, iterations and SaltedPassword, from
which the stored credential (StoredKey, ServerKey) is derived here, so the entry
holds no password. Checked before the write, per user, as Kafka does: an unknown
mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..16384, an empty
name or salt UNACCEPTABLE_CREDENTIAL, a user named twice DUPLICATE_RESOURCE (none of
its changes apply); a deletion of a credential that does not exist is
RESOURCE_NOT_FOUND when applied. The valid changes go in one entry.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest

from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    credential_from_salted,
)
from sink.security.user_ops import delete_op, upsert_op

_BY_TYPE = {v: k for k, v in MECHANISM_TYPES.items()}


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_alter(ctx, call))


def _check(name: str, mech_type: int, iterations: int | None, salt: bytes | None) -> Any:
    """None if acceptable, else (error, message)."""
    if not name:
        return ErrorCode.unacceptable_credential, "empty user name"
    if mech_type not in _BY_TYPE:
        return ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {mech_type}"
    if iterations is not None and not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        return (
            ErrorCode.unacceptable_credential,
            f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}",
        )
    if salt is not None and not salt:
        return ErrorCode.unacceptable_credential, "empty salt"
    return None


async def _alter(ctx: HandlerContext, call: Call) -> bytes:
    req = call.req
    names = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    order = list(dict.fromkeys(names))
    if ctx.users is None:
        why = "no user store on this node"
        return _encode(call.corr, [(n, ErrorCode.unknown_server_error, why) for n in order])
    relayed = await relay_to_controller(ctx, call)
    if relayed is not None:
        return relayed
    counts = Counter((n, m) for n, m in _pairs(req))
    verdict: dict[str, tuple[ErrorCode, str | None]] = {}
    for name, mech in _pairs(req):
        if counts[(name, mech)] > 1:
            verdict[name] = (ErrorCode.duplicate_resource, "mechanism of the user named twice")
    ops: list[dict] = []
    for d in req.deletions:
        bad = _check(d.name, int(d.mechanism), None, None)
        if bad:
            verdict.setdefault(d.name, bad)
    for u in req.upsertions:
        bad = _check(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt))
        if bad:
            verdict.setdefault(u.name, bad)
    for d in req.deletions:
        if d.name not in verdict:
            ops.append(delete_op(d.name, _BY_TYPE[int(d.mechanism)]))
    for u in req.upsertions:
        if u.name not in verdict:
            mech = _BY_TYPE[int(u.mechanism)]
            cred = credential_from_salted(
                mech, bytes(u.salted_password), bytes(u.salt), int(u.iterations)
            )
            ops.append(upsert_op(u.name, mech, cred))
    if ops:
        applied = await ctx.users.alter_users(ops)
        if isinstance(applied, list):
            for user, code, msg in applied:  # the first error of a user's ops wins
                if code != ErrorCode.none:
                    verdict.setdefault(user, (ErrorCode(code), msg))
        else:
            why = f"write failed ({ErrorCode(applied).name})"
            for op in ops:
                verdict.setdefault(op["user"], (ErrorCode(applied), why))
    results = [(n, *verdict.get(n, (ErrorCode.none, None))) for n in order]
    return _encode(call.corr, results)


def _pairs(req: Any) -> list[tuple[str, int]]:
    return [(d.name, int(d.mechanism)) for d in req.deletions] + [
        (u.name, int(u.mechanism)) for u in req.upsertions
    ]


def _encode(corr: int, results: list[tuple[str, ErrorCode, str | None]]) -> bytes:
    body = {
        "throttle_time": 0,
        "results": [
            {"user": n, "error_code": code, "error_message": msg} for n, code, msg in results
        ],
    }
    return encode_response(AlterUserScramCredentialsRequest.__api_key__, 0, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    names = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    return _encode(corr, [(n, code, None) for n in dict.fromkeys(names)])


API = Api(
    AlterUserScramCredentialsRequest,
    (0, 0),
    handle,
    error_response,
    summary=(
        "through the log on the controller (Raft leader; another node relays it); only derived "
        "credentials stored; Kafka's per-user checks"
    ),
)
