"""Every node's host label, agreed through the controller's log (docs/partition-groups.md,
"Hosts").

Placement keeps the replicas of a group on different hosts, so the controller's leader
must know every voter's `node.host`, not only its own. Each node registers its label
(HostAnnouncer: at start, and again if a restart changed it) with a "host" member
command, which the controller's leader commits (MoveOps.register_host, reached through
the read API's Members call); every node applies it into MemberTable.hosts. This is
KRaft's broker registration, which carries a broker's rack to the controller.

voter_hosts() is what placement sees. A voter that has not registered yet is left out
(KRaft: an unregistered broker gets no replicas) whenever labels are in use, since
counting it as its own host could put two replicas on one machine; in a cluster
without labels (every registered label empty, none configured here) it is its own
host, as every node is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("sink.node")

ANNOUNCE_INTERVAL_S = 1.0
"""How often a node compares its registered label with its own (and retries)."""
ANNOUNCE_TIMEOUT_S = 5.0
"""Bound of one registration (the controller's commit)."""


def voter_hosts(
    voters: Iterable[int], registered: Mapping[int, str], me: int, my_label: str
) -> dict[int, str | None]:
    """node id -> host label (None: its own host) of the voters placement may use.
    This node's label is its configuration's (the registration may still be on its
    way); another voter's is the one it registered. Unregistered voters are left out
    when labels are in use (a label configured here or registered by anyone)."""
    voters = list(voters)
    known = {n: registered[n] or None for n in voters if n in registered}
    if me in voters:
        known[me] = my_label or None
    if len(known) == len(voters) or not any(known.values()):
        return {n: known.get(n) for n in voters}
    return {n: known[n] for n in voters if n in known}


def unregistered(
    voters: Iterable[int], registered: Mapping[int, str], me: int, my_label: str
) -> list[int]:
    """The voters voter_hosts() leaves out (none when labels are not in use)."""
    voters = list(voters)
    return sorted(set(voters) - set(voter_hosts(voters, registered, me, my_label)))


async def labels_settled(
    missing: Callable[[], list[int]], timeout_s: float, poll_s: float = 0.05
) -> list[int]:
    """Wait at most timeout_s for every voter to have registered its label (a
    CreateTopics just after the cluster started: the registrations are a round trip
    behind); returns the voters still missing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (left := missing()) and loop.time() < deadline:
        await asyncio.sleep(poll_s)
    return left


class HostAnnouncer:
    """Registers this node's label until the applied table has it (then checks again
    every ANNOUNCE_INTERVAL_S: a snapshot install or a forget may drop it)."""

    def __init__(
        self,
        node_id: int,
        label: str,
        registered: Callable[[], Mapping[int, str]],
        members_call: Callable[[str], Awaitable[Any]],
    ) -> None:
        """registered() -> the applied MemberTable.hosts; members_call(json) -> a
        MembersReply (the read API's Members call on this node, which forwards to the
        controller's leader)."""
        self.node_id = node_id
        self.label = label
        self.registered = registered
        self.members_call = members_call
        self._task: asyncio.Task | None = None
        self.failures = 0

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        while True:
            if self.registered().get(self.node_id) != self.label:
                await self.announce()
            await asyncio.sleep(ANNOUNCE_INTERVAL_S)

    async def announce(self) -> bool:
        """One registration; True once the controller's leader committed it."""
        req = {
            "op": "host",
            "node": self.node_id,
            "host": self.label,
            "timeout_s": ANNOUNCE_TIMEOUT_S,
        }
        try:
            reply = await self.members_call(json.dumps(req))
        except Exception as exc:  # no leader yet, a peer restarting: the next round retries
            reply, error = None, repr(exc)
        else:
            error = f"{reply.code}: {reply.error}" if reply.code else ""
        if reply is not None and not error:
            log.info("sink.host_registered node=%d host=%r", self.node_id, self.label)
            return True
        self.failures += 1
        # Quiet while the cluster starts (no controller leader yet); loud if it persists.
        level = logging.WARNING if self.failures % 30 == 0 else logging.DEBUG
        log.log(
            level,
            "sink.host_register node=%d failed (%d times): %s",
            self.node_id,
            self.failures,
            error,
        )
        return False
