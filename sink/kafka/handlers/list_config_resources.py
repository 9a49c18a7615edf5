"""ListConfigResources (KIP-1142, Kafka 4.1; v0 was KIP-714's ListClientMetricsResources):
the resources DescribeConfigs can be asked about, by type (kafka-python's `configs list`,
`kafka-configs.sh --describe` discovery).

TOPIC (2): every topic this node knows; BROKER (4) and BROKER_LOGGER (8): every node of
this listener; GROUP (32) and CLIENT_METRICS (16): the ones with configs of their own,
none here (raftsink keeps no per-group configs and no client-metrics subscriptions).
resource_types empty: every type; v0 asks only for client metrics. A type Kafka does not
list configs for answers INVALID_REQUEST, as Kafka's broker does.

Authorization (as Kafka): DESCRIBE_CONFIGS on the cluster, checked before the handler."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    wanted = [int(t) for t in getattr(call.req, "resource_types", ())] or (
        list(TYPES) if call.version >= 1 else [CLIENT_METRICS]
    )
    if any(t not in TYPES for t in wanted):
        return answered(_encode(call.version, call.corr, ErrorCode.invalid_request, []))
    out: list[dict[str, Any]] = []
    for rtype in dict.fromkeys(wanted):
        if rtype == TOPIC:
            names = sorted(ctx.partitions.topics())
        elif rtype in (BROKER, BROKER_LOGGER):
            names = [str(n) for n in sorted(ctx.advertised.brokers)]
        else:
            names = []
        out.extend({"resource_name": n, "resource_type": rtype} for n in names)
    return answered(_encode(call.version, call.corr, ErrorCode.none, out))


def _encode(version: int, corr: int, code: ErrorCode, resources: list) -> bytes:
    body = {"throttle_time": 0, "error_code": code, "config_resources": resources}
    return encode_response(ListConfigResourcesRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return _encode(version, corr, code, [])


API = Api(
    ListConfigResourcesRequest,
    (0, 1),
    handle,
    error_response,
    summary=(
        "topics, brokers and broker loggers by type (groups and client metrics: none have "
        "configs of their own); v0: client metrics only"
    ),
)
