"""ApiVersions, Metadata, FindCoordinator and CreateTopics (kio-encoded, rare)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from sink.kafka import errors as E
from sink.kafka.build import encode_response
from sink.kafka.forward import ForwardError, forward_frame
from sink.kafka.handlers.context import HandlerContext

log = logging.getLogger("sink.kafka")

API_VERSIONS = 18
METADATA = 3
FIND_COORDINATOR = 10
CREATE_TOPICS = 19


def api_versions_body(supported: dict[int, tuple[int, int]], error: int = 0) -> dict:
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(supported.items())
        ],
        "throttle_time": 0,
    }


def encode_api_versions(
    version: int, corr: int, supported: dict[int, tuple[int, int]], error: int = 0
) -> bytes:
    """ApiVersions response; kio uses response header v0 for every version.
    The unsupported-version fallback passes version=0 and error=35."""
    return encode_response(API_VERSIONS, version, corr, api_versions_body(supported, error))


def _broker_list(ctx: HandlerContext) -> list[dict]:
    return [
        {"node_id": i, "host": h, "port": p, "rack": None}
        for i, (h, p) in sorted(ctx.brokers.items())
    ]


def _topic_entry(ctx: HandlerContext, name: str, error: int) -> dict[str, Any]:
    svc = ctx.service
    info = ctx.fsm.topic(name) if error == E.NONE else None
    if info is None:
        return {
            "error_code": error,
            "name": name,
            "topic_id": uuid.UUID(int=0),
            "is_internal": False,
            "partitions": [],
        }
    leader = ctx.leader_hint()  # while leaderless: the best guess, not -1
    epoch = svc.leader_epoch()
    replicas = sorted(ctx.brokers)
    return {
        "error_code": E.NONE,
        "name": name,
        "topic_id": info.topic_id,
        "is_internal": False,
        "partitions": [
            {
                "error_code": E.NONE if leader >= 0 else E.LEADER_NOT_AVAILABLE,
                "partition_index": p,
                "leader_id": leader,
                "leader_epoch": epoch,
                "replica_nodes": replicas,
                "isr_nodes": replicas,
                "offline_replicas": [],
            }
            for p in range(info.partitions)
        ],
    }


async def handle_metadata(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> bytes:
    fsm = ctx.fsm
    if req.topics is None or (version == 0 and not req.topics):
        names = sorted(fsm.topics())
        wanted: list[tuple[str, int]] = [(n, E.NONE) for n in names]
    else:
        allow = getattr(req, "allow_auto_topic_creation", True) and fsm.auto_create_topics
        svc = ctx.service
        ep = svc.forward_endpoint()
        missing = [t.name for t in req.topics if t.name is not None and fsm.topic(t.name) is None]
        if (
            missing
            and allow
            and frame
            and not svc.is_leader()
            and ep is not None
            and ep[0] != svc.node_id
        ):
            # Auto-creation goes through the log: let the leader answer (it creates).
            try:
                resp = await forward_frame(ep[1], ep[2], frame)
                if ctx.advertised.forwarded_replies_usable:
                    return resp
                # Created by now; answer below with this listener's addresses.
            except ForwardError as exc:
                log.warning("kafka.forward metadata failed: %s", exc)
        wanted = []
        for t in req.topics:
            name = t.name
            if name is None:
                wanted.append(("", E.UNKNOWN_TOPIC_ID))
                continue
            if fsm.topic(name) is not None:
                wanted.append((name, E.NONE))
            elif allow:
                err, _ = await ctx.service.ensure_topic(name)
                wanted.append((name, err))
            else:
                wanted.append((name, E.UNKNOWN_TOPIC_OR_PARTITION))
    leader = ctx.leader_id()
    body = {
        "throttle_time": 0,
        "brokers": _broker_list(ctx),
        "cluster_id": ctx.service.cluster_id,
        "controller_id": leader,
        "topics": [_topic_entry(ctx, n, err) for n, err in wanted],
    }
    return encode_response(METADATA, version, corr, body)


def _coordinator(ctx: HandlerContext) -> tuple[int, int, str, int]:
    ep = ctx.leader_endpoint()
    if ep is None:
        return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
    return E.NONE, ep[0], ep[1], ep[2]


async def handle_find_coordinator(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> bytes:
    """The Raft leader coordinates every group (OffsetCommit/OffsetFetch)."""
    err, node, host, port = _coordinator(ctx)
    if version >= 4:
        body: dict[str, Any] = {
            "throttle_time": 0,
            "coordinators": [
                {
                    "key": k,
                    "node_id": node,
                    "host": host,
                    "port": port,
                    "error_code": err,
                    "error_message": None,
                }
                for k in req.coordinator_keys
            ],
        }
    else:
        body = {
            "throttle_time": 0,
            "error_code": err,
            "error_message": None,
            "node_id": node,
            "host": host,
            "port": port,
        }
    return encode_response(FIND_COORDINATOR, version, corr, body)


async def handle_create_topics(
    ctx: HandlerContext, version: int, corr: int, req: Any, frame: bytes = b""
) -> bytes:
    svc = ctx.service
    out = []
    for t in req.topics:
        n = t.num_partitions if t.num_partitions > 0 else ctx.fsm.default_partitions
        if not svc.is_leader():
            err, msg, info = E.NOT_CONTROLLER, "not the controller (Raft leader)", None
        elif req.validate_only:
            exists = ctx.fsm.topic(t.name) is not None
            err, msg, info = (E.TOPIC_ALREADY_EXISTS if exists else E.NONE), None, None
        else:
            res = await svc.create_topic(t.name, n)
            err, info = res.error, res.topic
            msg = None if err == E.NONE else f"create topic {t.name!r} failed (error {err})"
        entry: dict[str, Any] = {
            "name": t.name,
            "error_code": err,
            "error_message": msg,
            "num_partitions": info.partitions if info else n,
            "replication_factor": len(ctx.brokers),
            "configs": [],
        }
        # Required from v7 on, every path: the zero UUID where no topic was created.
        entry["topic_id"] = info.topic_id if info is not None else uuid.UUID(int=0)
        out.append(entry)
    return encode_response(CREATE_TOPICS, version, corr, {"throttle_time": 0, "topics": out})


def api_versions_error_response(version: int, corr: int, req: Any, code: int) -> bytes:
    return encode_api_versions(version, corr, {}, code)


def metadata_error_response(version: int, corr: int, req: Any, code: int) -> bytes | None:
    """Every requested topic with code, no brokers (Kafka's getErrorResponse)."""
    if req is None or req.topics is None or (version == 0 and not req.topics):
        return None  # "all topics" cannot be mirrored: an empty list would read as none exist
    topics = [
        {
            "error_code": code,
            "name": t.name,
            "topic_id": uuid.UUID(int=0),
            "is_internal": False,
            "partitions": [],
        }
        for t in req.topics
    ]
    body = {
        "throttle_time": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": -1,
        "topics": topics,
    }
    return encode_response(METADATA, version, corr, body)


def find_coordinator_error_response(version: int, corr: int, req: Any, code: int) -> bytes | None:
    if version >= 4:
        if req is None:
            return None
        coordinators = [
            {
                "key": k,
                "node_id": -1,
                "host": "",
                "port": -1,
                "error_code": code,
                "error_message": None,
            }
            for k in req.coordinator_keys
        ]
        body: dict[str, Any] = {"throttle_time": 0, "coordinators": coordinators}
    else:
        body = {
            "throttle_time": 0,
            "error_code": code,
            "error_message": None,
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    return encode_response(FIND_COORDINATOR, version, corr, body)


def create_topics_error_response(version: int, corr: int, req: Any, code: int) -> bytes | None:
    if req is None:
        return None
    topics = [
        {
            "name": t.name,
            "topic_id": uuid.UUID(int=0),
            "error_code": code,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        for t in req.topics
    ]
    return encode_response(CREATE_TOPICS, version, corr, {"throttle_time": 0, "topics": topics})
