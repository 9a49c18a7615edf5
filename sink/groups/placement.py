"""Which node coordinates a consumer group: a slot hashed from the group id, then the
node hosting that slot.

coordinator_slot() is Kafka's own choice of `__consumer_offsets` partition
(GroupMetadataManager.partitionFor: Utils.abs(groupId.hashCode) % 50), so a group
maps to the same slot here as its offsets partition on a Kafka cluster with the
default offsets.topic.num.partitions. The slot is the unit placement moves: today
one Raft group holds every slot and its leader coordinates them all
(coordinator_node); when slots spread over partition groups, only slot_group()
changes, never the handlers that call these functions.

Pure functions: no I/O, no imports from the server.
"""

from __future__ import annotations

from typing import Protocol

COORDINATOR_SLOTS = 50
"""Kafka's default offsets.topic.num.partitions."""
SLOTS = COORDINATOR_SLOTS  # the name the `groups` part uses


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit signed overflow)."""
    h = 0
    raw = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _java_abs(n: int) -> int:
    """Kafka's Utils.abs: Math.abs, except Integer.MIN_VALUE -> 0."""
    return 0 if n == -(1 << 31) else abs(n)


def coordinator_slot(group_id: str, slots: int = COORDINATOR_SLOTS) -> int:
    """The coordinator slot of a group id, in [0, slots)."""
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    return _java_abs(java_string_hash(group_id)) % slots


def slot_group(slot: int) -> int:
    """The Raft group hosting a slot: today the one group, 0."""
    if not 0 <= slot < COORDINATOR_SLOTS:
        raise ValueError(f"coordinator slot out of range: {slot}")
    return 0


class LeaderLookup(Protocol):
    """Who leads the Raft group hosting the slots (sink.kafka.handlers.services.Controller)."""

    def leader_id(self) -> int: ...


def coordinator_node(slot: int, leadership: LeaderLookup) -> int:
    """The node id coordinating slot's groups: the leader of the Raft group hosting it
    (-1 while that group has no leader)."""
    slot_group(slot)  # validates the slot; one group today
    return leadership.leader_id()


def coordinates(group_id: str, node_id: int, leadership: LeaderLookup) -> bool:
    """True if node_id is the coordinator of group_id now (else: NOT_COORDINATOR)."""
    return coordinator_node(coordinator_slot(group_id), leadership) == node_id
