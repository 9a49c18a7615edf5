"""DescribeQuorum (KIP-595, KIP-836, KIP-853): the controller group's Raft quorum, as
KRaft describes its metadata log (`kafka-metadata-quorum.sh describe --status` /
`--replication`, Admin.describeMetadataQuorum, kafka-python's `cluster
describe-quorum`).

Only the topic-partition __cluster_metadata-0 is described (Kafka's rule: any other
answers UNKNOWN_TOPIC_OR_PARTITION for it). The controller group's leader answers; a
node that is not relays the frame there (controller_relay), as a KRaft broker sends it
to the active controller; with no controller reachable the partition answers
NOT_LEADER_OR_FOLLOWER (retriable), as a KRaft voter that is not the leader.

Per replica (sink.kafka.handlers.services.QuorumState): log_end_offset is the Raft log's
last index (its match index for a follower, as the leader tracks it), the high watermark
the commit index, leader_epoch the group's term; voters and observers (learners) by node
id. last_fetch_timestamp and last_caught_up_timestamp (v1+): -1, unknown (the Raft core
keeps no wall-clock time per follower), except the leader's caught-up time, now, as Kafka
reports it. replica_directory_id (v2): none (raftsink has one data directory per node
and no directory ids). nodes (v2): each voter's Kafka listener as this listener
advertises it (a relayed reply would name the controller's, so v2 is rebuilt here).

Authorization (as Kafka): DESCRIBE on the cluster, checked before the handler."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.serial import entity_reader

from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext, QuorumState
from sink.kafka.protocol import response_schema
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode

METADATA_TOPIC = "__cluster_metadata"
"""KRaft's metadata topic: the name Kafka's tools ask for (partition 0)."""

LISTENER_NAME = "PLAINTEXT"
"""The listener name v2's nodes carry: raftsink's Kafka listeners have no names; this is
the one a KRaft client expects where it prints one."""


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_describe(ctx, call))


async def _describe(ctx: HandlerContext, call: Call) -> bytes:
    lead = ctx.controller
    if _asks_metadata_log(call.req) and not lead.is_leader():
        relayed = await relay_to_controller(ctx, call, write=False)
        if relayed is not None:
            return relayed if call.version < 2 else _nodes_from_here(ctx, call, relayed)
    topics = []
    for t in call.req.topics:
        parts = []
        for p in t.partitions:
            idx = int(p.partition_index)
            if t.topic_name != METADATA_TOPIC or idx != 0:
                parts.append(_error_part(idx, ErrorCode.unknown_topic_or_partition))
            elif not lead.is_leader():
                parts.append(_error_part(idx, ErrorCode.not_leader_or_follower))
            else:
                parts.append(_partition(lead.quorum()))
        topics.append({"topic_name": t.topic_name, "partitions": parts})
    nodes = _nodes(ctx, [v for v, _end in lead.quorum().voters]) if lead.is_leader() else []
    return _encode(call.version, call.corr, ErrorCode.none, topics, nodes)


def _asks_metadata_log(req: Any) -> bool:
    return any(
        t.topic_name == METADATA_TOPIC and any(int(p.partition_index) == 0 for p in t.partitions)
        for t in req.topics
    )


def _partition(q: QuorumState) -> dict[str, Any]:
    now_ms = int(time.time() * 1000)

    def replica(node: int, log_end: int) -> dict[str, Any]:
        return {
            "replica_id": node,
            "replica_directory_id": None,
            "log_end_offset": log_end,
            "last_fetch_timestamp": -1,
            "last_caught_up_timestamp": now_ms if node == q.leader_id else -1,
        }

    return {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "leader_id": q.leader_id,
        "leader_epoch": q.leader_epoch,
        "high_watermark": q.high_watermark,
        "current_voters": [replica(n, end) for n, end in q.voters],
        "observers": [replica(n, end) for n, end in q.observers],
    }


def _error_part(index: int, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "error_message": None,
        "leader_id": -1,
        "leader_epoch": -1,
        "high_watermark": -1,
        "current_voters": [],
        "observers": [],
    }


def _nodes(ctx: HandlerContext, ids: list[int]) -> list[dict[str, Any]]:
    """v2's nodes: each node's Kafka listener as this listener advertises it."""
    brokers = ctx.advertised.brokers
    return [
        {"node_id": n, "listeners": [{"name": LISTENER_NAME, "host": h, "port": p}]}
        for n in ids
        if n in brokers
        for h, p in (brokers[n],)
    ]


def _nodes_from_here(ctx: HandlerContext, call: Call, reply: bytes) -> bytes:
    """The controller's v2 reply with nodes as this listener advertises them."""
    cls = response_schema(DescribeQuorumRequest.__api_key__, call.version)
    _hdr, n = entity_reader(cls.__header_schema__)(reply, 0)
    resp, _ = entity_reader(cls)(reply, n)
    body = dataclasses.asdict(resp)
    body["nodes"] = _nodes(ctx, [node["node_id"] for node in body["nodes"]])
    return encode_response(DescribeQuorumRequest.__api_key__, call.version, call.corr, body)


def _encode(version: int, corr: int, code: ErrorCode, topics: list, nodes: list) -> bytes:
    body = {"error_code": code, "error_message": None, "topics": topics, "nodes": nodes}
    return encode_response(DescribeQuorumRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return _encode(version, corr, code, [], [])


API = Api(
    DescribeQuorumRequest,
    (0, 2),
    handle,
    error_response,
    summary=(
        "__cluster_metadata-0: the controller group's quorum (leader, term as epoch, "
        "commit index as high watermark, voters' and learners' log ends from the "
        "leader's match indexes); another node relays it to the controller"
    ),
)
