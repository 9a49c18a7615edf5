"""CreateTopics: through the log, on the Raft leader (the controller); a follower
answers NOT_CONTROLLER. topic_id (v7) is filled on every path: the zero UUID where
no topic was created.

Configs: every config given is validated (sink.topics.configs) and stored with the
topic in one entry (tag "U"), or the topic is refused with INVALID_CONFIG naming the
reason: an unknown name, a bad value, cleanup.policy=compact; nothing is dropped.
validate_only checks names, counts and configs and creates nothing. v5+ answers the
topic's effective configs (with their sources), as Kafka does."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.schema.create_topics.v7.request import CreateTopicsRequest

from sink.kafka.authorize import may_create_topic
from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.topics.configs import TopicConfigError, TopicDefaults, describe, validate_all

_NO_TOPIC_ID = uuid.UUID(int=0)


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_create(ctx, call))


def _invalid_counts(t: Any, brokers: int) -> tuple[ErrorCode, str] | None:
    """Kafka's answer to impossible counts: -1 is "the broker default" (the protocol names
    it from v4; Kafka's controller takes it at every version), 0 and below -1 are refused,
    as is a replication factor above the number of brokers (every node holds every topic)."""
    if t.num_partitions == 0 or t.num_partitions < -1:
        return ErrorCode.invalid_partitions, f"num_partitions {t.num_partitions} must be > 0"
    rf = t.replication_factor
    if rf == 0 or rf < -1:
        return ErrorCode.invalid_replication_factor, f"replication_factor {rf} must be > 0"
    if rf > brokers:
        return (
            ErrorCode.invalid_replication_factor,
            f"replication_factor {rf} is larger than the {brokers} brokers",
        )
    return None


def _configs_of(t: Any) -> tuple[dict[str, str] | None, str | None]:
    """The request's configs validated -> (configs, None) or (None, reason)."""
    given: dict[str, str | None] = {}
    for c in t.configs:
        if c.name in given:
            return None, f"config {c.name} is given twice"
        given[c.name] = c.value
    try:
        return validate_all(given), None
    except TopicConfigError as exc:
        return None, str(exc)


def _described(configs: dict[str, str], defaults: TopicDefaults | None) -> list[dict]:
    if defaults is None:
        return []
    return [
        {
            "name": d.name,
            "value": value,
            "read_only": False,
            "config_source": int(source),
            "is_sensitive": False,
        }
        for d, value, source, _ in describe(configs, defaults)
    ]


async def _create(ctx: HandlerContext, call: Call) -> bytes:
    out = []
    admin = ctx.topic_configs
    defaults = admin.topic_defaults if admin is not None else None
    for t in call.req.topics:
        n = t.num_partitions if t.num_partitions > 0 else ctx.partitions.default_partitions
        invalid = _invalid_counts(t, len(ctx.brokers))
        configs, config_error = _configs_of(t)
        if not may_create_topic(ctx, call, t.name):
            err, msg, info = ErrorCode.topic_authorization_failed, "CREATE is not allowed", None
        elif not ctx.controller.is_leader():
            err, msg, info = ErrorCode.not_controller, "not the controller (Raft leader)", None
        elif invalid is not None:
            (err, msg), info = invalid, None
        elif config_error is not None:
            err, msg, info = ErrorCode.invalid_config, config_error, None
        elif configs and admin is None:
            err, msg, info = ErrorCode.invalid_config, "topic configs are not served here", None
        elif call.req.validate_only:
            exists = ctx.partitions.topic(t.name) is not None
            err = ErrorCode.topic_already_exists if exists else ErrorCode.none
            msg, info = None, None
        else:
            # The replication factor places replicas with partition groups (-1: the
            # configured default); one group holds every replica otherwise.
            rf = t.replication_factor
            if configs:
                assert admin is not None
                res = await admin.create_topic(t.name, n, configs, replication_factor=rf)
            else:
                res = await ctx.topics.create_topic(t.name, n, replication_factor=rf)
            err, info = res.error, res.topic
            msg = (
                None
                if err == ErrorCode.none
                else res.message or f"create topic {t.name!r} failed ({err.name})"
            )
        ok = err == ErrorCode.none and configs is not None
        out.append(
            {
                "name": t.name,
                "topic_id": info.topic_id if info is not None else _NO_TOPIC_ID,
                "error_code": err,
                "error_message": msg,
                "num_partitions": info.partitions if info else (-1 if invalid else n),
                "replication_factor": -1 if invalid else len(ctx.brokers),
                "configs": _described(configs, defaults) if ok and configs is not None else [],
            }
        )
    return _encode(call.version, call.corr, out)


def _encode(version: int, corr: int, topics: list) -> bytes:
    body = {"throttle_time": 0, "topics": topics}
    return encode_response(CreateTopicsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if req is None:
        return None
    topics = [
        {
            "name": t.name,
            "topic_id": _NO_TOPIC_ID,
            "error_code": code,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        for t in req.topics
    ]
    return _encode(version, corr, topics)


API = Api(
    CreateTopicsRequest,
    (2, 7),
    handle,
    error_response,
    summary=(
        "through the log; on a follower NOT_CONTROLLER (clients send it to controller_id = "
        "leader); configs validated and stored with the topic (INVALID_CONFIG otherwise), "
        "validate_only; v5+ answers the effective configs"
    ),
)
