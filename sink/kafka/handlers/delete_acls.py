"""DeleteAcls (v1-3): each filter (Kafka's AclBindingFilter: ANY / MATCH / LITERAL /
PREFIXED) goes into one log entry on the controller (Raft leader; a follower relays);
the bindings it removes are those it matches when the entry is applied, and are
answered per filter. An unreadable filter is INVALID_REQUEST on its own. Needs ALTER
on the cluster (sink.kafka.authorize)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.delete_acls.v3.request import DeleteAclsRequest

from sink.kafka.handlers.acl_wire import filter_of
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import AclBinding, AclError
from sink.security.acl_ops import delete_op

Result = tuple[ErrorCode, str | None, list[AclBinding]]


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_delete(ctx, call))


async def _delete(ctx: HandlerContext, call: Call) -> Response:
    relayed = await relay_to_controller(ctx, call)
    if relayed is not None:
        return relayed
    results: list[Result] = []
    ops: list[tuple[int, dict]] = []
    for f in call.req.filters:
        try:
            ops.append((len(results), delete_op(filter_of(f))))
            results.append((ErrorCode.none, None, []))
        except (AclError, ValueError) as exc:
            results.append((ErrorCode.invalid_request, str(exc), []))
    if ops and ctx.acls is None:
        for i, _ in ops:
            results[i] = (ErrorCode.security_disabled, "no ACLs on this node", [])
    elif ops:
        assert ctx.acls is not None
        applied = await ctx.acls.alter_acls([op for _, op in ops])
        for n, (i, _) in enumerate(ops):
            if not isinstance(applied, list):
                why = f"write failed ({ErrorCode(applied).name})"
                results[i] = (ErrorCode(applied), why, [])
            elif isinstance(applied[n], list):
                results[i] = (ErrorCode.none, None, [AclBinding.from_json(r) for r in applied[n]])
            else:
                code, msg = applied[n]
                results[i] = (ErrorCode(code), msg, [])
    return _encode(call.version, call.corr, results)


def _matching(b: AclBinding) -> dict:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": int(b.resource_type),
        "resource_name": b.name,
        "pattern_type": int(b.pattern_type),
        "principal": b.principal,
        "host": b.host,
        "operation": int(b.operation),
        "permission_type": int(b.permission),
    }


def _encode(version: int, corr: int, results: list[Result]) -> bytes:
    body = {
        "throttle_time": 0,
        "filter_results": [
            {"error_code": code, "error_message": msg, "matching_acls": [_matching(b) for b in bs]}
            for code, msg, bs in results
        ],
    }
    return encode_response(DeleteAclsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    return _encode(version, corr, [(code, None, []) for _ in req.filters])


API = Api(
    DeleteAclsRequest,
    (1, 3),
    handle,
    error_response,
    summary=(
        "each filter through the log on the controller (a follower relays); removes what it "
        "matches when applied; cluster ALTER"
    ),
)
