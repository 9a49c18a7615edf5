"""MemberWatch: a running node follows the live configuration (the log's, not `peers`).

Raft's configuration changes take effect when their entry is appended; the member
addresses arrive as applied "M" entries. The watch looks at both every `interval_s`
and, when either changed:
- makes every member its transport peer at the log's address (a node added later, a
  node replaced at a new address), so whichever node leads next reaches it;
- rewrites the Kafka broker list in place (the listeners share the dict): Metadata
  names exactly the live configuration's nodes, each at its listener address.

A node that learns it was removed (from its own log, or told by the operator through
the read API's Members "retire", since a leader stops replicating to a removed node and
it may never see the entry) retires: it stops leading, so Kafka requests get
NOT_LEADER_OR_FOLLOWER for `grace_s` (clients refresh metadata and move), then it
closes its Kafka listeners and connections. Raft and the read API stay up until the
operator stops the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sink.state.members import MemberAddress

log = logging.getLogger("sink.members")


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


class MemberWatch:
    def __init__(
        self,
        node: Any,
        fsm: Any,
        brokers: dict[int, tuple[str, int]],
        initial: dict[int, MemberAddress],
        kafka_servers: Callable[[], list[Any]],
        interval_s: float = 0.5,
        grace_s: float = 1.0,
    ) -> None:
        """brokers: the dict the main Kafka listener advertises (updated in place)."""
        self.node = node
        self.fsm = fsm
        self.brokers = brokers
        self.initial = dict(initial)
        self.kafka_servers = kafka_servers
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.retired = False
        self._seen: tuple | None = None
        self._was_member = False
        self._task: asyncio.Task | None = None
        self._bg: asyncio.Future | None = None  # the retirement, once started

    def start(self) -> None:
        self.refresh()
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.refresh()
            except Exception:  # a bad address must not end the watch (logged, retried)
                log.exception("sink.members refresh failed")

    def address_of(self, node_id: int) -> MemberAddress | None:
        return self.fsm.members.get(node_id) or self.initial.get(node_id)

    def refresh(self) -> bool:
        """Apply the live configuration if it changed; True if it did."""
        m = self.node.membership()
        key = (tuple(m["voters"]), tuple(m["learners"]), self.fsm.members.version)
        if key == self._seen:
            return False
        self._seen = key
        members = set(m["voters"]) | set(m["learners"])
        me = self.node.id
        transport = self.node.transport
        move = getattr(transport, "move_peer", None) or transport.add_peer
        for nid in sorted(members - {me}):
            addr = self.address_of(nid)
            if addr is None:
                continue
            if self.node.peers.get(nid) != addr.raft:
                self.node.peers[nid] = addr.raft
                move(nid, addr.raft)
        live = {}
        for nid in sorted(members | {me}):
            addr = self.address_of(nid)
            if addr is not None:
                live[nid] = _hostport(addr.kafka)
        if live != self.brokers:
            self.brokers.clear()
            self.brokers.update(live)
            log.warning("sink.members live configuration %s brokers=%s", m, sorted(live))
        if me in members:
            self._was_member = True
            if self.retired:  # added back (`raftsink members add`): serve Kafka again
                self._bg = asyncio.ensure_future(self.rejoin())
        elif self._was_member and members and not self.retired:
            self._bg = asyncio.ensure_future(self.retire("removed from the configuration"))
        return True

    async def rejoin(self) -> None:
        """Back in the configuration after a retirement: the Kafka listeners start again."""
        if not self.retired:
            return
        self.retired = False
        log.warning("sink.members node=%d is a member again: Kafka listeners start", self.node.id)
        for server in self.kafka_servers():
            await server.start()

    async def retire(self, why: str) -> None:
        """This node left the configuration: NOT_LEADER_OR_FOLLOWER for grace_s, then
        close the Kafka listeners (clients go to the live nodes)."""
        if self.retired:
            return
        self.retired = True
        log.warning("sink.members retiring node=%d: %s", self.node.id, why)
        self.brokers.pop(self.node.id, None)
        await asyncio.sleep(self.grace_s)
        if not self.retired:  # added back during the grace period
            return
        for server in self.kafka_servers():
            await server.stop()
