"""CreateTopics: through the log, on the Raft leader (the controller); a follower
relays the request there (sink.kafka.handlers.controller_relay) and answers
NOT_CONTROLLER only when it knows no controller or cannot reach it. topic_id (v7) is filled on every path: the zero UUID where
no topic was created.

Configs: every config given is validated (sink.topics.configs) and stored with the
topic in one entry (tag "U"), or the topic is refused with INVALID_CONFIG naming the
reason: an unknown name, a bad value, cleanup.policy=compact; nothing is dropped.
validate_only checks names, counts and configs and creates nothing. v5+ answers the
topic's effective configs (with their sources), as Kafka does.

Explicit replica lists (`assignments`, kafka-topics --replica-assignment) are checked as
Kafka's controller does (_assignments_of; then placement's hard rules: known, live nodes
on distinct hosts) and placed as given with partition groups; one group holds every
replica, so there only their count matters."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any

from kio.schema.create_topics.v7.request import CreateTopicsRequest

from sink.kafka.authorize import may_create_topic
from sink.kafka.handlers.api import Api, Call, Response, answer_by, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.topics.configs import TopicConfigError, TopicDefaults, describe, validate_all

_NO_TOPIC_ID = uuid.UUID(int=0)


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_create(ctx, call))


def _invalid_counts(partitions: int, rf: int, brokers: int) -> tuple[ErrorCode, str] | None:
    """Kafka's answer to impossible counts: -1 is "the broker default" (the protocol names
    it from v4; Kafka's controller takes it at every version), 0 and below -1 are refused,
    as is a replication factor above the number of brokers (every node holds every topic)."""
    if partitions == 0 or partitions < -1:
        return ErrorCode.invalid_partitions, f"num_partitions {partitions} must be > 0"
    if rf == 0 or rf < -1:
        return ErrorCode.invalid_replication_factor, f"replication_factor {rf} must be > 0"
    if rf > brokers:
        return (
            ErrorCode.invalid_replication_factor,
            f"replication_factor {rf} is larger than the {brokers} brokers",
        )
    return None


def _assignments_of(t: Any) -> tuple[list[list[int]] | None, tuple[ErrorCode, str] | None]:
    """The request's explicit replica lists in partition order (kafka-topics
    --replica-assignment) -> (lists or None, None), or (None, refusal) in Kafka's terms:
    with lists, num_partitions and replication_factor must be -1 (INVALID_REQUEST);
    the partitions 0-based and consecutive, no list empty, none naming a node twice,
    every list as long as the first (INVALID_REPLICA_ASSIGNMENT). Whether the nodes
    exist, are live and on distinct hosts is placement's check (partition groups)."""
    if not t.assignments:
        return None, None
    if t.num_partitions != -1 or t.replication_factor != -1:
        return None, (
            ErrorCode.invalid_request,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    by_index = {a.partition_index: [int(b) for b in a.broker_ids] for a in t.assignments}
    bad = ErrorCode.invalid_replica_assignment
    if len(by_index) != len(t.assignments) or sorted(by_index) != list(range(len(by_index))):
        return None, (bad, "partitions should be 0-based and consecutive, each given once")
    lists = [by_index[p] for p in range(len(by_index))]
    for p, nodes in enumerate(lists):
        if not nodes:
            return None, (bad, f"partition {p}: an empty replica list")
        if len(set(nodes)) != len(nodes):
            return None, (bad, f"partition {p}: duplicate brokers in {nodes}")
        if len(nodes) != len(lists[0]):
            return None, (bad, "all partitions should have the same number of replicas")
    return lists, None


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
    """Every topic of the request at once (each placement and commit still one at a
    time, on the controller: PartitionRouting.create_topic): the settle waits overlap
    and all end by the request's timeout, which a client also waits by (librdkafka
    gives up on the request a little after it). A name given twice is INVALID_REQUEST
    for each of its entries, as Kafka answers."""
    allowed = {t.name: may_create_topic(ctx, call, t.name) for t in call.req.topics}
    relayed = await relay_to_controller(
        ctx, call, allowed=all(allowed.values()), timeout=call.req.timeout
    )
    if relayed is not None:
        return relayed
    names = Counter(t.name for t in call.req.topics)
    settle_by = answer_by(call.req.timeout)
    out = await asyncio.gather(
        *(
            _create_one(ctx, call, t, allowed[t.name], names[t.name] > 1, settle_by)
            for t in call.req.topics
        )
    )
    return _encode(call.version, call.corr, list(out))


async def _create_one(
    ctx: HandlerContext, call: Call, t: Any, allowed: bool, duplicate: bool, settle_by: float
) -> dict:
    admin = ctx.topic_configs
    defaults = admin.topic_defaults if admin is not None else None
    assignments, refused = _assignments_of(t)
    if assignments is not None:
        n, rf = len(assignments), len(assignments[0])
        invalid = _invalid_counts(n, rf, len(ctx.brokers))
    else:
        n = t.num_partitions if t.num_partitions > 0 else ctx.partitions.default_partitions
        rf = t.replication_factor
        invalid = refused or _invalid_counts(t.num_partitions, rf, len(ctx.brokers))
    if duplicate:
        invalid = ErrorCode.invalid_request, f"topic {t.name!r} is named twice in the request"
    configs, config_error = _configs_of(t)
    if not allowed:
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
        # The replication factor (-1: the configured default) or the explicit lists
        # place replicas with partition groups; one group holds every replica otherwise.
        if configs:
            assert admin is not None
            res = await admin.create_topic(
                t.name,
                n,
                configs,
                replication_factor=rf,
                assignments=assignments,
                settle_by=settle_by,
            )
        else:
            res = await ctx.topics.create_topic(
                t.name, n, replication_factor=rf, assignments=assignments, settle_by=settle_by
            )
        err, info = res.error, res.topic
        msg = (
            None
            if err == ErrorCode.none
            else res.message or f"create topic {t.name!r} failed ({err.name})"
        )
    ok = err == ErrorCode.none and configs is not None
    if invalid is not None:
        replicas = -1
    elif ok and info is not None and not call.req.validate_only:
        # what was placed (partition groups: the topic's replication factor; one
        # group: every node)
        replicas = len(ctx.role(t.name, 0).replicas) or len(ctx.brokers)
    else:
        replicas = rf if rf > 0 else len(ctx.brokers)
    return {
        "name": t.name,
        "topic_id": info.topic_id if info is not None else _NO_TOPIC_ID,
        "error_code": err,
        "error_message": msg,
        "num_partitions": info.partitions if info else (-1 if invalid else n),
        "replication_factor": replicas,
        "configs": _described(configs, defaults) if ok and configs is not None else [],
    }


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
        "through the log; a follower relays it to the controller (NOT_CONTROLLER when "
        "none is known or reachable); configs validated and stored with the topic (INVALID_CONFIG otherwise), "
        "replica assignments checked and placed as given, validate_only; v5+ answers the "
        "effective configs"
    ),
)
