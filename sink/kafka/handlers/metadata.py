"""Metadata: each partition as its owning Raft group stands (PartitionRoles.role):
leader_id = the group's leader (while leaderless: the best guess, see
SinkService.leader_hint; LEADER_NOT_AVAILABLE only when there is none),
leader_epoch = the leader's term (while leaderless the last leader's:
RaftGroup.leader_epoch), replica_nodes = its voters, isr_nodes and
offline_replicas as the group reports them; node ids this listener does not
advertise are left out. controller_id = this node, which takes every controller request
(relayed to the controller in an Envelope: HandlerContext.controller_for_clients, as
KRaft's brokers name a live broker, KIP-590).
Brokers: every advertised node but those this node declares down, while it hears a
majority (HandlerContext.live_brokers), as Kafka lists only live registrations; a
partition leader left out reads -1 (LEADER_NOT_AVAILABLE: clients look again), never an
id missing from the broker list. An isolated node lists every node.
Topics asked for are auto-created if allowed; a node that is not the controller
relays such a request to it, which creates them.

Authorization (as Kafka's): the all-topics answer lists only the topics the principal
may DESCRIBE; a named one it may not is TOPIC_AUTHORIZATION_FAILED; auto-creation
needs CREATE (cluster or topic), else UNKNOWN_TOPIC_OR_PARTITION where it may
DESCRIBE the name. authorized_operations (v8+): with include_topic_authorized_operations
each topic served (not one refused) carries the principal's bit set on it, and with
include_cluster_authorized_operations (v8-10) the cluster's (sink.kafka.authorize);
otherwise INT32_MIN."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from kio.schema.metadata.v12.request import MetadataRequest

from sink.kafka.authorize import NOT_REQUESTED, authorized_operations, topic_allowed
from sink.kafka.authorize import may_create_topic as creatable
from sink.kafka.forward import ForwardError, forward_frame
from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode
from sink.security.acl import CLUSTER_NAME, Operation, ResourceType

log = logging.getLogger("sink.kafka")
_NO_TOPIC_ID = uuid.UUID(int=0)


def _broker_list(ctx: HandlerContext) -> list[dict]:
    return [
        {"node_id": i, "host": h, "port": p, "rack": None}
        for i, (h, p) in sorted(ctx.live_brokers().items())
    ]


def _topic_entry(ctx: HandlerContext, name: str, error: ErrorCode) -> dict[str, Any]:
    info = ctx.partitions.topic(name) if error == ErrorCode.none else None
    if info is None:
        return _missing_topic(name, error)
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": info.topic_id,
        "is_internal": False,
        "partitions": [_partition_entry(ctx, name, p) for p in range(info.partitions)],
    }


def _partition_entry(ctx: HandlerContext, name: str, index: int) -> dict[str, Any]:
    """One partition as its group stands now; ids filtered to this listener's brokers."""
    role = ctx.role(name, index)
    # while leaderless: the best guess, not -1; but never a node left out of the broker
    # list (declared down: the client would have nowhere to send)
    leader = ctx.live_broker(role.hint)
    advertised = ctx.advertised.brokers
    return {
        "error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": role.leader_epoch,
        "replica_nodes": [n for n in role.replicas if n in advertised],
        "isr_nodes": [n for n in role.isr if n in advertised],
        "offline_replicas": [n for n in role.offline if n in advertised],
    }


def _missing_topic(name: str, error: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": error,
        "name": name,
        "topic_id": _NO_TOPIC_ID,
        "is_internal": False,
        "partitions": [],
    }


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    req, version = call.req, call.version
    fsm = ctx.partitions

    def describable(name: str) -> bool:
        return topic_allowed(ctx, call, Operation.DESCRIBE, name)

    if req.topics is None or (version == 0 and not req.topics):
        wanted: list[tuple[str, ErrorCode]] = [
            (n, ErrorCode.none) for n in sorted(fsm.topics()) if describable(n)
        ]
    else:
        allow = getattr(req, "allow_auto_topic_creation", True) and fsm.auto_create_topics
        lead = ctx.controller  # topic creation is the controller's
        ep = lead.forward_endpoint()
        missing = [t.name for t in req.topics if t.name is not None and fsm.topic(t.name) is None]
        # A relayed request runs as the relay user at the leader: relay only what this
        # principal may see and create in full (else answer here, refusing the rest).
        all_allowed = all(
            describable(t.name) if fsm.topic(t.name) is not None else creatable(ctx, call, t.name)
            for t in req.topics
            if t.name is not None
        )
        if (
            missing
            and allow
            and all_allowed
            and call.frame
            and not lead.is_leader()
            and ep is not None
            and ep[0] != lead.node_id
        ):
            # Auto-creation goes through the log: let the leader answer (it creates).
            try:
                resp = await forward_frame(ep[1], ep[2], call.frame, login=ctx.relay_login)
                # The leader answered for the relay user: its authorized_operations
                # are not this principal's, so those are computed here.
                if ctx.advertised.forwarded_replies_usable and not _wants_operations(req):
                    return answered(resp)
                # Created by now; answer below with this listener's addresses.
            except ForwardError as exc:
                log.warning("kafka.forward metadata failed: %s", exc)
        wanted = []
        for t in req.topics:
            name = t.name
            if name is None:
                wanted.append(("", ErrorCode.unknown_topic_id))
            elif fsm.topic(name) is not None:
                ok = describable(name)
                wanted.append(
                    (name, ErrorCode.none if ok else ErrorCode.topic_authorization_failed)
                )
            elif allow and creatable(ctx, call, name):
                err, _ = await ctx.topics.ensure_topic(name)
                wanted.append((name, err))
            elif describable(name):
                wanted.append((name, ErrorCode.unknown_topic_or_partition))
            else:
                wanted.append((name, ErrorCode.topic_authorization_failed))
    topics = [_topic_entry(ctx, n, err) for n, err in wanted]
    if getattr(req, "include_topic_authorized_operations", False):
        for t in topics:
            if t["error_code"] != ErrorCode.topic_authorization_failed:
                t["topic_authorized_operations"] = authorized_operations(
                    ctx, call, ResourceType.TOPIC, t["name"]
                )
    cluster_ops = NOT_REQUESTED
    if getattr(req, "include_cluster_authorized_operations", False):
        cluster_ops = authorized_operations(ctx, call, ResourceType.CLUSTER, CLUSTER_NAME)
    body = {
        "throttle_time": 0,
        "brokers": _broker_list(ctx),
        "cluster_id": ctx.controller.cluster_id,
        "controller_id": ctx.controller_for_clients(),
        "topics": topics,
        "cluster_authorized_operations": cluster_ops,
    }
    return answered(encode_response(MetadataRequest.__api_key__, version, call.corr, body))


def _wants_operations(req: Any) -> bool:
    return bool(
        getattr(req, "include_topic_authorized_operations", False)
        or getattr(req, "include_cluster_authorized_operations", False)
    )


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    """Every requested topic with code, no brokers (Kafka's getErrorResponse)."""
    if req is None or req.topics is None or (version == 0 and not req.topics):
        return None  # "all topics" cannot be mirrored: an empty list would read as none exist
    body = {
        "throttle_time": 0,
        "brokers": [],
        "cluster_id": None,
        "controller_id": -1,
        "topics": [_missing_topic(t.name or "", code) for t in req.topics],
    }
    return encode_response(MetadataRequest.__api_key__, version, corr, body)


API = Api(
    MetadataRequest,
    (0, 12),
    handle,
    error_response,
    summary=(
        "every node with its advertised address (less those declared down, from a "
        "majority's view; a leader left out reads -1); controller_id = the answering node, which "
        "relays controller requests (KIP-590); per partition: leader = its Raft group's "
        "leader, leader_epoch = that group's term, replicas = its voters; topic_id stable "
        "for the topic's life; auto-creation"
    ),
)
