"""DescribeCluster (KIP-700): the cluster id, every node with the address this
listener advertises but those this node declares down while it hears a majority (as
Metadata: HandlerContext.live_brokers), and as the controller this node, which relays controller requests
(HandlerContext.controller_for_clients, as a KRaft broker names a live broker).
endpoint_type 2 (controllers, v1) is refused with UNSUPPORTED_ENDPOINT_TYPE as a
broker does. cluster_authorized_operations: the principal's bit set on the cluster
when include_cluster_authorized_operations asks (sink.kafka.authorize), else
INT32_MIN. DESCRIBE on the cluster is checked before the handler (the gate)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.describe_cluster.v1.request import DescribeClusterRequest

from sink.kafka.authorize import NOT_REQUESTED, authorized_operations
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import CLUSTER_NAME, ResourceType

_BROKERS = 1


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    endpoint = getattr(call.req, "endpoint_type", _BROKERS)
    if endpoint != _BROKERS:
        return answered(
            _encode(call.version, call.corr, ErrorCode.unsupported_endpoint_type, "", [], -1)
        )
    brokers = [
        {"broker_id": i, "host": h, "port": p, "rack": None}
        for i, (h, p) in sorted(ctx.live_brokers().items())
    ]
    ops = NOT_REQUESTED
    if getattr(call.req, "include_cluster_authorized_operations", False):
        ops = authorized_operations(ctx, call, ResourceType.CLUSTER, CLUSTER_NAME)
    return answered(
        _encode(
            call.version,
            call.corr,
            ErrorCode.none,
            ctx.controller.cluster_id,
            brokers,
            ctx.controller_for_clients(),
            ops,
        )
    )


def _encode(
    version: int,
    corr: int,
    code: ErrorCode,
    cluster_id: str,
    brokers: list,
    controller: int,
    ops: int = NOT_REQUESTED,
) -> bytes:
    body = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": None,
        "endpoint_type": _BROKERS,
        "cluster_id": cluster_id,
        "controller_id": controller,
        "brokers": brokers,
        "cluster_authorized_operations": ops,
    }
    return encode_response(DescribeClusterRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return _encode(version, corr, code, "", [], -1)


API = Api(
    DescribeClusterRequest,
    (0, 1),
    handle,
    error_response,
    summary=(
        "cluster id, every node at this listener's addresses (less those declared down, "
        "from a majority's view), controller = the answering "
        "node (it relays controller requests, KIP-590)"
    ),
)
