"""ElectLeaders (KIP-183, KIP-460): `kafka-leader-election.sh`, Admin.electLeaders,
kafka-python's `partitions elect-leaders`.

PREFERRED (0; v0 knows no other): each partition's leadership goes to its preferred
replica (the placement's first) by a leadership transfer on the partition's group leader
(sink.node.preferred_election), the leader balancer's move, on demand. Any node takes
the request: partitions whose group another node leads are sent on to that node (where
this node knows no leader, to its best guess or another replica), as one ElectLeaders
request per node, with half the time left (a node that does not lead them either sends
them on again only while more than MIN_HOP_S is left, so a disagreement about a leader
cannot bounce a request for long). Per partition: none (moved),
ELECTION_NOT_NEEDED (the preferred replica leads), PREFERRED_LEADER_NOT_AVAILABLE with
the reason (not a voter yet, down, the transfer did not finish, no leader now),
UNKNOWN_TOPIC_OR_PARTITION.

UNCLEAN (1): Raft never elects a replica that may lack committed records, so there is
nothing unclean to do: ELECTION_NOT_NEEDED where the partition has a leader,
ELIGIBLE_LEADERS_NOT_AVAILABLE where it has none yet (its election is under way, among
the replicas that may win it).

topic_partitions null: every partition whose leader is not its preferred replica
(PREFERRED) or that has no leader (UNCLEAN); as Kafka, the others are not listed.
One group (partition groups off): no partition has a preferred leader of its own:
ELECTION_NOT_NEEDED while the group has a leader. Another election type: INVALID_REQUEST
(v1+ at the top level, v0 cannot send one).

Authorization (as Kafka): ALTER on the cluster, checked before the handler."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections import defaultdict
from typing import Any

from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.serial import entity_reader

from sink.kafka.forward import forward_frame
from sink.kafka.handlers.api import Api, Call, Response, later, timeout_seconds
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol import response_schema
from sink.kafka.protocol.build import encode_request, encode_response
from sink.kafka.protocol.errors import ErrorCode

log = logging.getLogger("sink.kafka")

PREFERRED, UNCLEAN = 0, 1
MIN_HOP_S = 1.0
"""A request is sent on to another node only while at least this much of its timeout is
left; the node it goes to gets half of what is left, so a request that finds no leader
(every node guessing another) stops after a few hops."""
NO_LEADER = "no leader now: an election is under way"

Result = tuple[ErrorCode, str | None]


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_elect(ctx, call))


async def _elect(ctx: HandlerContext, call: Call) -> bytes:
    req = call.req
    kind = int(getattr(req, "election_type", PREFERRED))
    if kind not in (PREFERRED, UNCLEAN) and call.version >= 1:
        msg = f"election type {kind} is neither PREFERRED (0) nor UNCLEAN (1)"
        return _encode(call.version, call.corr, ErrorCode.invalid_request, [], msg)
    timeout_s = max(0.1, timeout_seconds(req.timeout))
    deadline = asyncio.get_running_loop().time() + timeout_s
    wanted = _wanted(ctx, req, kind)
    results: dict[tuple[str, int], Result] = {}
    elsewhere: dict[int, list[tuple[str, int]]] = defaultdict(list)
    answers = await asyncio.gather(*(_one(ctx, kind, t, p, timeout_s) for t, p in wanted))
    for (topic, partition), res in zip(wanted, answers, strict=True):
        target = _ask_next(ctx, topic, partition) if res is None else -1
        if res is not None:
            results[(topic, partition)] = res
        elif target < 0:
            results[(topic, partition)] = (ErrorCode.preferred_leader_not_available, NO_LEADER)
        else:
            elsewhere[target].append((topic, partition))
    if elsewhere:
        sent = await asyncio.gather(
            *(_send_on(ctx, call, node, parts, deadline) for node, parts in elsewhere.items())
        )
        for got in sent:
            results.update(got)
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (topic, partition), (code, msg) in sorted(results.items()):
        by_topic[topic].append(
            {"partition_id": partition, "error_code": code, "error_message": msg}
        )
    out = [{"topic": t, "partition_result": parts} for t, parts in by_topic.items()]
    return _encode(call.version, call.corr, ErrorCode.none, out, None)


def _wanted(ctx: HandlerContext, req: Any, kind: int) -> list[tuple[str, int]]:
    if req.topic_partitions is not None:
        return [(t.topic, int(p)) for t in req.topic_partitions for p in t.partitions]
    out = []
    for name in sorted(ctx.partitions.topics()):
        info = ctx.partitions.topic(name)
        for p in range(info.partitions if info is not None else 0):
            leader = ctx.role(name, p).leader
            if kind == UNCLEAN:
                off = leader < 0
            else:
                off = ctx.elections is not None and leader != ctx.elections.preferred_replica(
                    name, p
                )
            if off:
                out.append((name, p))
    return out


async def _one(
    ctx: HandlerContext, kind: int, topic: str, partition: int, timeout_s: float
) -> Result | None:
    """This node's answer for one partition; None: its group's leader must answer."""
    if not ctx.partitions.has_partition(topic, partition):
        return ErrorCode.unknown_topic_or_partition, None
    leader = ctx.role(topic, partition).leader
    if kind == UNCLEAN or ctx.elections is None:
        if leader >= 0:
            return ErrorCode.election_not_needed, None
        return ErrorCode.eligible_leaders_not_available, "no leader yet: an election is under way"
    return await ctx.elections.elect(topic, partition, timeout_s)


def _ask_next(ctx: HandlerContext, topic: str, partition: int) -> int:
    """Where a partition this node does not lead goes on to: its leader as this node knows
    it; where it knows none (a replica of a quiesced group that restarted learns its
    leader only when the group wakes), the best guess (Metadata's hint), else another of
    its replicas, which may know; -1: nowhere."""
    me = ctx.controller.node_id
    role = ctx.role(topic, partition)
    for node in (role.leader, role.hint, *role.replicas):
        if node >= 0 and node != me:
            return node
    return -1


async def _send_on(
    ctx: HandlerContext, call: Call, node: int, parts: list[tuple[str, int]], deadline: float
) -> dict[tuple[str, int], Result]:
    """The partitions' results from node, the leader of their groups (as this node knows)."""
    left = deadline - asyncio.get_running_loop().time()
    ep = ctx.controller.relay_endpoint(node)
    if left < MIN_HOP_S or ep is None:
        why = f"partition led by node {node}, which could not be asked in time"
        return {tp: (ErrorCode.preferred_leader_not_available, why) for tp in parts}
    topics: dict[str, list[int]] = defaultdict(list)
    for topic, partition in parts:
        topics[topic].append(partition)
    values = {
        "election_type": PREFERRED,
        "topic_partitions": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "timeout": datetime.timedelta(seconds=left / 2),
    }
    api = ElectLeadersRequest.__api_key__
    frame = encode_request(api, call.version, call.corr, "raftsink-relay", values)
    try:
        reply = await forward_frame(ep[0], ep[1], frame, timeout=left, login=ctx.relay_login)
        cls = response_schema(api, call.version)
        _hdr, n = entity_reader(cls.__header_schema__)(reply, 0)
        resp, _ = entity_reader(cls)(reply, n)
    except Exception as exc:  # unreachable, or an answer that does not decode
        log.warning("kafka.forward elect_leaders to node %d failed: %s", node, exc)
        why = f"partition led by node {node}, which could not be asked: {exc}"
        return {tp: (ErrorCode.preferred_leader_not_available, why) for tp in parts}
    out: dict[tuple[str, int], Result] = {}
    if getattr(resp, "error_code", ErrorCode.none) != ErrorCode.none:
        for tp in parts:
            out[tp] = (resp.error_code, f"node {node} refused the request")
    for r in resp.replica_election_results:
        for p in r.partition_result:
            out[(r.topic, int(p.partition_id))] = (p.error_code, p.error_message)
    return out


def _encode(version: int, corr: int, code: ErrorCode, results: list, msg: str | None) -> bytes:
    if msg is not None:
        log.info("kafka.elect_leaders refused: %s", msg)
    body = {"throttle_time": 0, "error_code": code, "replica_election_results": results}
    return encode_response(ElectLeadersRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    if version >= 1:
        return _encode(version, corr, code, [], None)
    if req is None or req.topic_partitions is None:
        return None
    results = [
        {
            "topic": t.topic,
            "partition_result": [
                {"partition_id": p, "error_code": code, "error_message": None} for p in t.partitions
            ],
        }
        for t in req.topic_partitions
    ]
    return _encode(version, corr, code, results, None)


API = Api(
    ElectLeadersRequest,
    (0, 2),
    handle,
    error_response,
    summary=(
        "PREFERRED: a leadership transfer to each partition's preferred replica on its "
        "group's leader (other nodes send it on); UNCLEAN: ELECTION_NOT_NEEDED / "
        "ELIGIBLE_LEADERS_NOT_AVAILABLE (Raft elects no unclean leader)"
    ),
)
