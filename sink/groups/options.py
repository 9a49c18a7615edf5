"""GroupOptions: the `groups` configuration section (Kafka's group.* broker settings)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupOptions:
    initial_rebalance_delay_ms: int = 3000
    """The first rebalance of an empty group completes once no new member has joined for
    this long (Kafka's group.initial.rebalance.delay.ms), at most the rebalance timeout
    after it started. 0: complete as soon as the timer fires."""
    min_session_timeout_ms: int = 6000
    """Smallest session timeout a member may ask for (group.min.session.timeout.ms);
    below it JoinGroup answers INVALID_SESSION_TIMEOUT."""
    max_session_timeout_ms: int = 1_800_000
    """Largest session timeout a member may ask for (group.max.session.timeout.ms)."""
    max_size: int = 10_000
    """Members (joined or awaiting their member id) one group may hold; the next
    joiner gets GROUP_MAX_SIZE_REACHED (group.max.size)."""
    max_member_metadata_bytes: int = 1 << 20
    """Bound on one member's protocol metadata (the sum over its protocols) in
    JoinGroup and on one member's assignment in SyncGroup; beyond it the request is
    answered INVALID_REQUEST. Each completed generation is one Raft entry holding
    every member's metadata and assignment, so this and max_size bound its size."""
    max_group_record_bytes: int = 32 << 20
    """Bound on one group's logged generation (every member's metadata and assignment,
    one Raft entry; below raft.max_entry_bytes, 64 MiB by default). A SyncGroup whose
    generation would exceed it is answered INVALID_REQUEST and the group rebalances."""
    new_member_join_timeout_ms: int = 300_000
    """A new member whose JoinGroup is parked is evicted if its rebalance has not
    completed by then (Kafka's new member join timeout, KIP-394)."""

    def __post_init__(self) -> None:
        for name in (
            "initial_rebalance_delay_ms",
            "min_session_timeout_ms",
            "max_session_timeout_ms",
            "new_member_join_timeout_ms",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"groups.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_session_timeout_ms < self.min_session_timeout_ms:
            raise ValueError(
                "groups.max_session_timeout_ms must be >= groups.min_session_timeout_ms "
                f"({self.min_session_timeout_ms}), got {self.max_session_timeout_ms}"
            )
        if self.max_size < 1:
            raise ValueError(f"groups.max_size must be >= 1, got {self.max_size}")
        if self.max_group_record_bytes < 1024:
            raise ValueError(
                f"groups.max_group_record_bytes must be >= 1024, got {self.max_group_record_bytes}"
            )
        if self.max_member_metadata_bytes < 1:
            raise ValueError(
                f"groups.max_member_metadata_bytes must be >= 1, got {self.max_member_metadata_bytes}"
            )
