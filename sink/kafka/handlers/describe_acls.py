"""DescribeAcls (v1-3): the applied bindings a filter matches (ANY / MATCH / LITERAL
/ PREFIXED as Kafka's AclBindingFilter), grouped by resource pattern. Answered from
this node's applied state (as a Kafka broker from its metadata cache). Needs
DESCRIBE on the cluster (sink.kafka.authorize)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.describe_acls.v3.request import DescribeAclsRequest

from sink.kafka.handlers.acl_wire import filter_of
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.controller_relay import read_point
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import AclError


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req = call.req
    if ctx.acls is None:
        return answered(_error(call.version, call.corr, ErrorCode.security_disabled, None))
    try:
        f = filter_of(req)
    except (AclError, ValueError) as exc:
        return answered(_error(call.version, call.corr, ErrorCode.invalid_request, str(exc)))
    await read_point(ctx)  # the controller's writes before this describe
    groups: dict[tuple, list[dict]] = {}
    for b in ctx.acls.describe(f):
        groups.setdefault((b.resource_type, b.name, b.pattern_type), []).append(
            {
                "principal": b.principal,
                "host": b.host,
                "operation": int(b.operation),
                "permission_type": int(b.permission),
            }
        )
    resources = [
        {"resource_type": int(t), "resource_name": n, "pattern_type": int(p), "acls": acls}
        for (t, n, p), acls in groups.items()
    ]
    body = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "resources": resources,
    }
    return answered(encode_response(DescribeAclsRequest.__api_key__, call.version, call.corr, body))


def _error(version: int, corr: int, code: ErrorCode, msg: str | None) -> bytes:
    body = {"throttle_time": 0, "error_code": code, "error_message": msg, "resources": []}
    return encode_response(DescribeAclsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return _error(version, corr, code, None)


API = Api(
    DescribeAclsRequest,
    (1, 3),
    handle,
    error_response,
    summary="the applied bindings a filter matches (ANY/MATCH/LITERAL/PREFIXED); cluster DESCRIBE",
)
