"""A follower's relay of a controller request to the controller (the Raft leader).

Admin clients send CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
AlterClientQuotas, AlterUserScramCredentials, CreateAcls/DeleteAcls and
AlterPartitionReassignments to the controller they last read in Metadata. librdkafka reads it again only on its
periodic refresh (topic.metadata.refresh.interval.ms, 5 min by default, and an admin
client with no topics refreshes nothing else): after a leader change it would keep
sending to the old controller and read NOT_CONTROLLER for minutes. So a node that is
not the controller relays the exact frame to the one it knows, as a KRaft broker
forwards these requests to its active controller; none of their responses names a
broker address, so the reply is good on every listener.

While this node knows no controller (an election), the relay waits for one, up to
ELECTION_WAIT_S, rather than answering NOT_CONTROLLER at once: librdkafka hands that
error to the application for a topic creation instead of retrying it. Likewise a
controller that cannot be reached (killed: this node still names it until its election
timeout) is tried again, the new one once known, within the same ELECTION_WAIT_S;
a request that may have been delivered is never sent twice.

With authorization on and a relay user (SASL), the frame travels in an Envelope
(sink.kafka.handlers.envelope) carrying the client's principal and address: the
controller authorizes each item as that client, so a partly allowed request is relayed
whole. Without authorization the exact frame is relayed (nothing is checked anywhere).
With authorization on and no relay user (mutual TLS or plaintext only) the relay runs as
this node's connection principal, which the controller cannot take an envelope from, so
the exact frame is relayed only when the client may do all of it (allowed), as before
(HandlerContext.envelopes). Once a write is answered this node waits until it has
applied it too (read-your-writes at the node the client asks next: every node names
itself the controller, sink.kafka.handlers.metadata). NOT_CONTROLLER remains the answer
when no controller is known or the relay fails (retriable: clients refresh their
metadata and send again)."""

from __future__ import annotations

import asyncio
import logging

from sink.kafka.forward import ForwardError, ForwardUnreachable, forward_frame
from sink.kafka.handlers.api import Call, timeout_seconds
from sink.kafka.handlers.envelope import EnvelopeError, unwrap, wrap
from sink.kafka.handlers.services import Controller, HandlerContext

log = logging.getLogger("sink.kafka")

RELAY_TIMEOUT_S = 5.0
"""How long a relay of a request without a timeout of its own waits for the answer."""

RELAY_MARGIN_S = 2.0
"""A request with a timeout field (the controller waits up to it, e.g. for a new
topic's leaders) is relayed for that long plus this margin, so that the controller's
own answer, not the relay's timeout, reaches the client."""

RELAY_MAX_S = 120.0
"""No relay waits longer than this, whatever the request's timeout says."""

ELECTION_WAIT_S = 10.0
"""How long a request waits for a controller to be known when none is (an election
takes about an election timeout, 1-2 s by default); then NOT_CONTROLLER."""

POLL_S = 0.05
"""How often that wait looks again (the Raft node learns its leader on other tasks)."""

UNREACHABLE_RETRY_S = 0.5
"""A controller that could not be reached (the request never sent: a killed process
refuses connections) is tried again once another is known, or after this long (the
same one restarting), until ELECTION_WAIT_S from the request's arrival."""


def relay_timeout(timeout: object) -> float:
    """The relay's wait for a request whose timeout field is timeout (a timedelta, or
    ms; None: none)."""
    if timeout is None:
        return RELAY_TIMEOUT_S
    return min(RELAY_MAX_S, max(RELAY_TIMEOUT_S, timeout_seconds(timeout) + RELAY_MARGIN_S))


async def relay_to_controller(
    ctx: HandlerContext,
    call: Call,
    *,
    allowed: bool = True,
    timeout: object = None,
    write: bool = True,
) -> bytes | None:
    """The controller's answer to this request when this node is not the controller
    and knows which node is; None: answer here (this node is the controller, none is
    known after ELECTION_WAIT_S, the relay failed, or the client may not do all of it
    (allowed False) where no envelope carries its principal).
    timeout: the request's timeout field (see relay_timeout). write: the request
    changes the controller's state; once answered, this node has applied it too."""
    lead = ctx.controller
    wrapped = ctx.envelopes()  # the controller authorizes as the client
    if not call.frame or not (allowed or wrapped):
        return None
    frame = wrap(call) if wrapped else call.frame
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(ELECTION_WAIT_S, relay_timeout(timeout))
    while True:
        if lead.is_leader():
            return None
        ep = lead.forward_endpoint()
        if ep is None:
            # No controller known: an election, also one that follows a dead
            # controller the loop below gave up on (CI: answered NOT_CONTROLLER while the
            # survivors still voted).
            if loop.time() >= deadline:
                log.warning(
                    "kafka.forward %s: no controller known after %.1f s",
                    type(call.req).__name__,
                    min(ELECTION_WAIT_S, relay_timeout(timeout)),
                )
                return None
            await _controller_known(lead, deadline - loop.time())
            continue
        if ep[0] == lead.node_id:
            return None
        try:
            reply = await forward_frame(
                ep[1], ep[2], frame, timeout=relay_timeout(timeout), login=ctx.relay_login
            )
            if wrapped:
                reply = unwrap(reply)
        except ForwardUnreachable as exc:
            # Never sent (the controller died, or is restarting): look again until a
            # controller takes it, as an election follows a dead one.
            if loop.time() >= deadline:
                log.warning("kafka.forward %s failed: %s", type(call.req).__name__, exc)
                return None
            await _controller_changed(lead, ep[0], min(UNREACHABLE_RETRY_S, deadline - loop.time()))
            continue
        except (ForwardError, EnvelopeError) as exc:
            log.warning("kafka.forward %s failed: %s", type(call.req).__name__, exc)
            return None
        if write:
            await _applied_here(lead, deadline - loop.time())
        return reply


async def read_point(ctx: HandlerContext) -> None:
    """Before a describe of controller state (ACLs, configs, quotas, users) at a node that
    is not the controller: wait until this node applied every write committed before the
    describe (ReadIndex). Every node names itself the controller, so a client's write
    may have been relayed by another node than the one its next describe reaches (two
    admin clients, CI); read-your-writes at the relaying node alone did not cover that."""
    if not ctx.controller.is_leader():
        await _applied_here(ctx.controller, RELAY_TIMEOUT_S)


async def _applied_here(lead: Controller, wait_s: float) -> None:
    """Read-your-writes: a client that asks this node next (DescribeConfigs after
    AlterConfigs, `acl list` after `acl add`) sees the write the controller answered for.
    A linearizable read point through the controller (ReadIndex), then this node's
    apply up to it; a controller change or timeout only costs the guarantee (logged),
    never the answer: the write itself is done."""
    try:
        await lead.catch_up(max(RELAY_TIMEOUT_S, wait_s))
    except Exception as exc:
        log.info("kafka.forward read-your-writes wait failed: %r", exc)


async def _controller_changed(lead: Controller, failed: int, wait_s: float) -> None:
    """Return once lead names a controller other than failed, or after wait_s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while lead.leader_id() in (failed, -1) and loop.time() < deadline:
        await asyncio.sleep(POLL_S)


async def _controller_known(lead: Controller, wait_s: float) -> None:
    """Return once lead knows a controller, or after wait_s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while lead.leader_id() < 0 and loop.time() < deadline:
        await asyncio.sleep(POLL_S)
