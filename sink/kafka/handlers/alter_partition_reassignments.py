"""AlterPartitionReassignments (KIP-455): move partitions' replicas, on the controller's
leader (with partition groups: sink.node.replica_moves); another node relays the request
there (sink.kafka.handlers.controller_relay; NOT_CONTROLLER when it knows no controller
or cannot reach it).

Per partition: a replica list starts a move (the first replica is the new preferred
leader); null cancels the pending one (NO_REASSIGNMENT_IN_PROGRESS if there is none):
the group's leader then converges back on the list it had. A bad list answers
INVALID_REPLICA_ASSIGNMENT (39) or INVALID_REPLICATION_FACTOR (38) with the reason; an
unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION. The answer comes once the move is
committed (the data moves afterwards: ListPartitionReassignments shows it until done).
One group (partition groups off): every node holds every partition, nothing can move:
INVALID_REPLICA_ASSIGNMENT saying so.

Authorization (as Kafka): ALTER on the cluster, checked before the handler (the gate)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
)

from sink.kafka.handlers.api import Api, Call, Response, later
from sink.kafka.handlers.controller_relay import relay_to_controller
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode

ONE_GROUP = "partition groups are off: every node holds every partition, none can move"


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    return later(_reassign(ctx, call))


async def _reassign(ctx: HandlerContext, call: Call) -> bytes:
    if ctx.moves is not None:
        relayed = await relay_to_controller(ctx, call, timeout=call.req.timeout)
        if relayed is not None:
            return relayed
    timeout_s = max(1.0, call.req.timeout.total_seconds())
    out = []
    for t in call.req.topics:
        parts = []
        for p in t.partitions:
            replicas = None if p.replicas is None else [int(b) for b in p.replicas]
            if ctx.moves is None:
                err, msg = ErrorCode.invalid_replica_assignment, ONE_GROUP
            else:
                err, msg = await ctx.moves.reassign(
                    t.name, int(p.partition_index), replicas, timeout_s
                )
            parts.append(
                {"partition_index": p.partition_index, "error_code": err, "error_message": msg}
            )
        out.append({"name": t.name, "partitions": parts})
    return _encode(call.version, call.corr, ErrorCode.none, None, out)


def _encode(version: int, corr: int, code: ErrorCode, msg: str | None, responses: list) -> bytes:
    body = {"throttle_time": 0, "error_code": code, "error_message": msg, "responses": responses}
    return encode_response(AlterPartitionReassignmentsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    return _encode(version, corr, code, None, [])


API = Api(
    AlterPartitionReassignmentsRequest,
    (0, 0),
    handle,
    error_response,
    summary=(
        "partition groups: on the controller's leader (another node relays it), a move per "
        "partition through the log (null cancels; NO_REASSIGNMENT_IN_PROGRESS); bad lists "
        "38/39 with the reason; one group: 39"
    ),
)
