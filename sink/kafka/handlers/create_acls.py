"""CreateAcls (v1-3; v0 is gone from Kafka 4 and no client in use needs it):
bindings stored through the Raft log on the controller (Raft leader); a follower
relays the request to the leader. Each creation is answered on its own: an invalid
one (ANY/MATCH/UNKNOWN values, a principal that is not TYPE:NAME, a CLUSTER not
named kafka-cluster) INVALID_REQUEST with the reason, the others are written in
one entry. Creating a binding that exists succeeds and changes nothing. Needs ALTER
on the cluster (sink.kafka.authorize)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.create_acls.v3.request import CreateAclsRequest

from sink.kafka.handlers.acl_wire import binding_of
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import AclError
from sink.security.acl_ops import create_op


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_create(ctx, call))


async def _create(ctx: HandlerContext, call: Call) -> Response:
    relayed = await relay_to_controller(ctx, call)
    if relayed is not None:
        return relayed
    results: list[tuple[ErrorCode, str | None]] = []
    ops: list[tuple[int, dict]] = []  # (position in results, op)
    for c in call.req.creations:
        try:
            b = binding_of(c)
        except (AclError, ValueError) as exc:
            results.append((ErrorCode.invalid_request, str(exc)))
            continue
        ops.append((len(results), create_op(b)))
        results.append((ErrorCode.none, None))
    if ops and ctx.acls is None:
        for i, _ in ops:
            results[i] = (ErrorCode.security_disabled, "no ACLs on this node")
    elif ops:
        assert ctx.acls is not None
        applied = await ctx.acls.alter_acls([op for _, op in ops])
        for n, (i, _) in enumerate(ops):
            if isinstance(applied, list):
                code, msg = applied[n]
                results[i] = (ErrorCode(code), msg)
            else:
                results[i] = (ErrorCode(applied), f"write failed ({ErrorCode(applied).name})")
    return _encode(call.version, call.corr, results)


def _encode(version: int, corr: int, results: list[tuple[ErrorCode, str | None]]) -> bytes:
    body = {
        "throttle_time": 0,
        "results": [{"error_code": code, "error_message": msg} for code, msg in results],
    }
    return encode_response(CreateAclsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    return _encode(version, corr, [(code, None) for _ in req.creations])


API = Api(
    CreateAclsRequest,
    (1, 3),
    handle,
    error_response,
    summary=(
        "through the log on the controller (a follower relays); per-creation "
        "INVALID_REQUEST; needs cluster ALTER"
    ),
)
