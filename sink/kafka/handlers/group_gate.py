"""The gate every group-coordinator API passes first: is this node the group's
coordinator, and has it loaded the group state?

- the coordinator of a group is the node placement names for the group's slot
  (sink.groups.placement); any other node answers NOT_COORDINATOR, and the client
  looks the coordinator up again (FindCoordinator);
- a coordinator whose own-term entry is not applied yet may not have applied every
  commit of earlier terms: COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka answers
  while it loads __consumer_offsets.

A group id longer than MAX_GROUP_ID_BYTES is INVALID_GROUP_ID before anything else: Kafka
stores group ids in int16-length strings (its __consumer_offsets keys), and a flexible
request can carry a longer one.
"""

from __future__ import annotations

from sink.groups.placement import coordinates
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.errors import ErrorCode

MAX_GROUP_ID_BYTES = 32767


def coordinator_error(ctx: HandlerContext, group: str) -> ErrorCode:
    """NONE if this node may answer for group now, else the error to answer."""
    if len(group.encode()) > MAX_GROUP_ID_BYTES:
        return ErrorCode.invalid_group_id
    lead = ctx.controller
    if not coordinates(group, lead.node_id, lead):
        return ErrorCode.not_coordinator
    if not lead.leader_ready():
        return ErrorCode.coordinator_load_in_progress
    return ErrorCode.none
