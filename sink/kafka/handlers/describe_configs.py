"""DescribeConfigs (v1-4): topic and broker resources from the node asked.

Topics: every config of sink.topics.configs with its value and source
(DYNAMIC_TOPIC_CONFIG where the topic overrides it, STATIC_BROKER_CONFIG where the node
configuration's `topics` section changed the default, else DEFAULT_CONFIG), synonyms
(v1+, with include_synonyms) from the most to the least specific, config_type and
documentation (v3+). Brokers (resource name "" or this node's id): the broker-level
defaults under Kafka's names (log.retention.ms, ...). A follower answers from its
applied state (it may lag the controller by the commit in flight), as Kafka's brokers
answer from their metadata cache. configuration_keys null: all; otherwise only the
keys named (unknown names are left out, as Kafka does). A follower that does not know a
topic yet (a creation still being applied here) relays the request to the leader, so a
client that creates and then describes never sees its new topic missing.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest

from sink.kafka.authorize import config_denial
from sink.kafka.forward import ForwardError, forward_frame
from sink.kafka.handlers.api import Api, Call, Response, answered, later
from sink.kafka.handlers.controller_relay import read_point
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.topics.configs import describe, describe_broker

TOPIC = 2
BROKER = 4


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    await read_point(ctx)  # the controller's writes before this describe
    lead, admin = ctx.controller, ctx.topic_configs
    ep = lead.forward_endpoint()
    if (
        admin is not None
        and not lead.is_leader()
        and ep is not None
        and ep[0] != lead.node_id
        and call.frame
        and any(
            r.resource_type == TOPIC and admin.topic_configs(r.resource_name) is None
            for r in call.req.resources
        )
        # relayed, it runs as the relay user: only what this principal may see in full
        and not any(config_denial(ctx, call, r, alter=False) for r in call.req.resources)
    ):
        return later(_relay(ctx, call, ep))
    return answered(_answer(ctx, call))


async def _relay(ctx: HandlerContext, call: Call, ep: tuple[int, str, int]) -> Response:
    try:
        return await forward_frame(ep[1], ep[2], call.frame, login=ctx.relay_login)
    except ForwardError:  # the leader is unreachable: answer from what is applied here
        return _answer(ctx, call)


def _answer(ctx: HandlerContext, call: Call) -> bytes:
    req = call.req
    admin = ctx.topic_configs
    results = []
    for r in req.resources:
        err, msg, configs = ErrorCode.none, None, []
        keys = None if r.configuration_keys is None else set(r.configuration_keys)
        denied = config_denial(ctx, call, r, alter=False)
        if denied is not None:
            err, msg = denied, "DESCRIBE_CONFIGS is not allowed"
        elif admin is None:
            err, msg = ErrorCode.unknown_server_error, "topic configs are not served here"
        elif r.resource_type == TOPIC:
            overrides = admin.topic_configs(r.resource_name)
            if overrides is None:
                err, msg = ErrorCode.unknown_topic_or_partition, "unknown topic"
            else:
                configs = _topic_configs(overrides, admin.topic_defaults, req, keys)
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(ctx.controller.node_id)):
                err = ErrorCode.invalid_request
                msg = f"unexpected broker id {r.resource_name}, this is {ctx.controller.node_id}"
            else:
                configs = _broker_configs(admin.topic_defaults, req, keys)
        else:
            err = ErrorCode.invalid_request
            msg = f"resource type {r.resource_type} is not served (topics and brokers only)"
        results.append(
            {
                "error_code": err,
                "error_message": msg,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
                "configs": configs,
            }
        )
    return _encode(call.version, call.corr, results)


def _topic_configs(overrides: dict, defaults: Any, req: Any, keys: set | None) -> list[dict]:
    out = []
    for d, value, source, synonyms in describe(overrides, defaults):
        if keys is not None and d.name not in keys:
            continue
        out.append(
            {
                "name": d.name,
                "value": value,
                "read_only": False,
                "config_source": int(source),
                "is_sensitive": False,
                "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in synonyms]
                if req.include_synonyms
                else [],
                "config_type": int(d.type),
                "documentation": _doc(d.doc, d.effect)
                if getattr(req, "include_documentation", False)
                else None,
            }
        )
    return out


def _broker_configs(defaults: Any, req: Any, keys: set | None) -> list[dict]:
    out = []
    for name, value, source, ctype, doc in describe_broker(defaults):
        if keys is not None and name not in keys:
            continue
        out.append(
            {
                "name": name,
                "value": value,
                # Static: set in the node configuration, changed by a restart only.
                "read_only": True,
                "config_source": int(source),
                "is_sensitive": False,
                "synonyms": [{"name": name, "value": value, "source": int(source)}]
                if req.include_synonyms
                else [],
                "config_type": int(ctype),
                "documentation": doc if getattr(req, "include_documentation", False) else None,
            }
        )
    return out


def _doc(doc: str, effect: str) -> str:
    return f"{doc} ({effect})" if effect else doc


def _encode(version: int, corr: int, results: list) -> bytes:
    body = {"throttle_time": 0, "results": results}
    return encode_response(DescribeConfigsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    results = [
        {
            "error_code": code,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [],
        }
        for r in req.resources
    ]
    return _encode(version, corr, results)


API = Api(
    DescribeConfigsRequest,
    (1, 4),
    handle,
    error_response,
    summary=(
        "topic (sources DYNAMIC_TOPIC_CONFIG / STATIC_BROKER_CONFIG / DEFAULT_CONFIG, "
        "synonyms, types, docs) and broker resources (this node's defaults, read-only) "
        "from the applied state of the node asked"
    ),
)
