"""A follower's relay of a controller request to the controller (the Raft leader).

Admin clients send CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
AlterClientQuotas, CreateAcls/DeleteAcls and AlterPartitionReassignments to the
controller they last read in Metadata. librdkafka reads it again only on its
periodic refresh (topic.metadata.refresh.interval.ms, 5 min by default, and an admin
client with no topics refreshes nothing else): after a leader change it would keep
sending to the old controller and read NOT_CONTROLLER for minutes. So a node that is
not the controller relays the exact frame to the one it knows, as a KRaft broker
forwards these requests to its active controller; none of their responses names a
broker address, so the reply is good on every listener.

A relay runs as the relay user (sink.kafka.forward), a super user: the follower
authorizes first and relays only what the client may do in full (allowed); what it
may not is answered here, with NOT_CONTROLLER for the rest. NOT_CONTROLLER remains the
answer when no controller is known or the relay fails (retriable: clients refresh
their metadata and send again)."""

from __future__ import annotations

import logging

from sink.kafka.forward import ForwardError, forward_frame
from sink.kafka.handlers.api import Call
from sink.kafka.handlers.services import HandlerContext

log = logging.getLogger("sink.kafka")

RELAY_TIMEOUT_S = 5.0
"""How long a relay of a request without a timeout of its own waits for the answer."""

RELAY_MARGIN_S = 2.0
"""A request with a timeout field (the controller waits up to it, e.g. for a new
topic's leaders) is relayed for that long plus this margin, so that the controller's
own answer, not the relay's timeout, reaches the client."""

RELAY_MAX_S = 120.0
"""No relay waits longer than this, whatever the request's timeout says."""


def relay_timeout(timeout: object) -> float:
    """The relay's wait for a request whose timeout field is timeout (a timedelta, or
    ms; None: none)."""
    if timeout is None:
        return RELAY_TIMEOUT_S
    total = getattr(timeout, "total_seconds", None)
    s = total() if total is not None else float(timeout) / 1000  # type: ignore[arg-type]
    return min(RELAY_MAX_S, max(RELAY_TIMEOUT_S, s + RELAY_MARGIN_S))


async def relay_to_controller(
    ctx: HandlerContext, call: Call, *, allowed: bool = True, timeout: object = None
) -> bytes | None:
    """The controller's answer to this request when this node is not the controller
    and knows which node is; None: answer here (this node is the controller, none is
    known, the client may not do all of it (allowed False), the relay failed).
    timeout: the request's timeout field (see relay_timeout)."""
    lead = ctx.controller
    if not allowed or lead.is_leader() or not call.frame:
        return None
    ep = lead.forward_endpoint()
    if ep is None or ep[0] == lead.node_id:
        return None
    try:
        return await forward_frame(
            ep[1], ep[2], call.frame, timeout=relay_timeout(timeout), login=ctx.relay_login
        )
    except ForwardError as exc:
        log.warning("kafka.forward %s failed: %s", type(call.req).__name__, exc)
        return None
