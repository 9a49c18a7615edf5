"""Preferred-leader elections on demand (Kafka's ElectLeaders, PREFERRED): the leader of a
partition's data group hands leadership to the placement's preferred replica (its first)
with the group's own transfer_leader, as the leader balancer does when its return delay
has passed (sink.node.balance_driver). Leadership moves only by transfer: never a forced
election, so no committed record can be lost by asking.

Only the group's leader can transfer, so `elect` answers None on any other node: the
caller (sink.kafka.handlers.elect_leaders) sends the request on to the leader.

Refusals (Kafka's error codes, with a reason):
- ELECTION_NOT_NEEDED: the preferred replica leads already;
- PREFERRED_LEADER_NOT_AVAILABLE: it is not a voter of the group (a move in progress),
  this node's host declares it down, or the transfer did not finish in time (the
  group keeps its leader; transfer_leader gives up after an election timeout).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

Outcome = tuple[ErrorCode, str | None]


class _Groups(Protocol):
    """sink.node.data_groups.DataGroups, as far as elections read it."""

    def lookup(self, topic: str, partition: int) -> tuple[Any, Any]: ...


class PreferredElections:
    def __init__(self, groups: _Groups, peers_down: Any, node_id: int) -> None:
        self.groups = groups
        self.peers_down = peers_down
        """() -> the node ids this node's Raft host declares down."""
        self.node_id = node_id
        self.started = 0
        self.succeeded = 0

    def preferred_replica(self, topic: str, partition: int) -> int:
        """The partition's preferred replica (the placement's first), -1 if unknown."""
        placement, _hosted = self.groups.lookup(topic, partition)
        return -1 if placement is None else placement.replicas[0]

    async def elect(self, topic: str, partition: int, timeout_s: float) -> Outcome | None:
        """Move the partition's leadership to its preferred replica -> (error, reason);
        None: this node does not lead the partition's group."""
        placement, hosted = self.groups.lookup(topic, partition)
        if placement is None:
            return ErrorCode.unknown_topic_or_partition, None
        if hosted is None or not hosted.group.is_leader():
            return None
        preferred = placement.replicas[0]
        if preferred == self.node_id:
            return ErrorCode.election_not_needed, None
        if preferred not in hosted.group.membership()["voters"]:
            return (
                ErrorCode.preferred_leader_not_available,
                f"preferred replica {preferred} is not a voter of the partition's group yet",
            )
        if preferred in self.peers_down():
            return (
                ErrorCode.preferred_leader_not_available,
                f"preferred replica {preferred} is down",
            )
        self.started += 1
        try:
            await asyncio.wait_for(hosted.group.transfer_leader(preferred, timeout_s), timeout_s)
        except Exception as exc:  # the group keeps its leader: say why
            return (
                ErrorCode.preferred_leader_not_available,
                f"leadership transfer to {preferred} did not finish: {exc!r}",
            )
        self.succeeded += 1
        return ErrorCode.none, None
