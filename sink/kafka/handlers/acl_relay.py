"""What CreateAcls and DeleteAcls share: the relay of a follower to the leader
(admin clients send them to any broker; Kafka forwards them to its controller)
and the answer when the node keeps no ACLs."""

from __future__ import annotations

import logging

from sink.kafka.forward import ForwardError, forward_frame
from sink.kafka.handlers.api import Call
from sink.kafka.handlers.services import HandlerContext

log = logging.getLogger("sink.kafka")


async def relay_to_leader(ctx: HandlerContext, call: Call) -> bytes | None:
    """The leader's answer to this request when this node is a follower that knows
    the leader; None: answer here (this node leads, no leader known, the relay failed)."""
    lead = ctx.controller
    ep = lead.forward_endpoint()
    if lead.is_leader() or ep is None or ep[0] == lead.node_id or not call.frame:
        return None
    try:
        return await forward_frame(ep[1], ep[2], call.frame, login=ctx.relay_login)
    except ForwardError as exc:
        log.warning("kafka.forward %s failed: %s", type(call.req).__name__, exc)
        return None
