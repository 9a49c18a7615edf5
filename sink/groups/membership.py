"""What the committed-offset APIs ask the group coordinator (the `groups` part builds
it): a small interface, so offsets work with or without a coordinator.

OffsetCommit carries generation / member id / group instance id (v1+, v7+): a commit
from a member is accepted only if the coordinator says it is a member of the current
generation; a "simple" commit (generation -1, no member id) is accepted for a group with
no members (Kafka: GroupCoordinator.handleCommitOffsets). OffsetDelete and expiry need
to know whether a group has members and which topics it subscribes to.

A leaf: imports only kio's error codes.
"""

from __future__ import annotations

from collections.abc import Container
from typing import NamedTuple, Protocol

from kio.schema.errors import ErrorCode


class GroupStatus(NamedTuple):
    """A group as its coordinator knows it."""

    empty: bool
    """No members (Kafka state Empty)."""
    empty_since_ms: int = -1
    """Wall-clock ms when it became empty (-1: unknown; expiry then uses commit times)."""
    subscribed: Container[str] | None = None
    """Topics its members subscribe to (consumer protocol), any container (`in`): a
    frozenset, or a view asking the coordinator per topic; None: unknown."""


class GroupMembership(Protocol):
    def check_commit(
        self, group: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """NONE if this commit may be stored, else the error Kafka gives
        (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID,
        COORDINATOR_LOAD_IN_PROGRESS). Simple commits (generation < 0, member_id "") to a
        group without members answer NONE."""
        ...

    def status(self, group: str) -> GroupStatus | None:
        """The group's status; None: the coordinator does not know it (a group that only
        commits offsets, as simple/assign consumers' groups)."""
        ...


class NoGroups:
    """No group coordinator: every group is a simple one (no members, no generations)."""

    def check_commit(
        self, group: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        # Kafka for a group it does not know: generation < 0 stores the offsets (a simple
        # group), any real generation is ILLEGAL_GENERATION (no member can have joined).
        return ErrorCode.none if generation < 0 else ErrorCode.illegal_generation

    def status(self, group: str) -> GroupStatus | None:
        return None


NO_GROUPS = NoGroups()


class OffsetHolders(Protocol):
    """Which groups hold committed offsets (sink.state.group_offsets.GroupOffsetTable):
    the coordinator shows a group that only commits offsets as Kafka does, an Empty
    group with protocol type "" (ListGroups, DescribeGroups, DeleteGroups)."""

    def has_group(self, group: str) -> bool: ...

    def groups(self) -> list[str]: ...


class NoOffsets:
    """No committed offsets anywhere (a coordinator without the offsets part)."""

    def has_group(self, group: str) -> bool:
        return False

    def groups(self) -> list[str]:
        return []


NO_OFFSETS = NoOffsets()
