"""RaftNode configuration: typed, validated once, every default documented."""

from __future__ import annotations

from dataclasses import dataclass, field

from raftlog.storage import StorageOptions


@dataclass(frozen=True, slots=True)
class NodeOptions:
    tick_ms: int = 30
    """One logical tick of the core's clock."""
    election_ticks: int = 10
    """Election timeout T: followers campaign after [T, 2T) ticks without a leader
    (300-600 ms by default); a leader steps down after T ticks without a quorum."""
    heartbeat_ticks: int = 1
    """A leader sends heartbeats every this many ticks."""
    max_pending_proposals: int = 200_000
    """Back-pressure: apply() raises BusyError beyond this many uncommitted proposals."""
    proposal_timeout_s: float = 10.0
    """apply()/read_index() fail with a timeout error after this long."""
    max_append_bytes: int = 1 << 20
    """Entry bytes per AppendEntries message (at least one entry is sent)."""
    max_inflight_msgs: int = 256
    """Pipelined AppendEntries per follower before waiting for acknowledgements."""
    max_inflight_bytes: int = 32 << 20
    """Bytes of pipelined AppendEntries per follower."""
    snapshot_every_entries: int = 0
    """Take a snapshot once this many entries were applied since the last (0: never)."""
    snapshot_keep_entries: int = 10_000
    """Entries kept in the log behind a snapshot, for followers slightly behind."""
    commit_checkpoint_s: float = 1.0
    """How often the commit index checkpoint is persisted when it moved."""
    storage: StorageOptions = field(default_factory=StorageOptions)

    def __post_init__(self) -> None:
        if self.tick_ms <= 0 or self.election_ticks <= 1 or self.heartbeat_ticks <= 0:
            raise ValueError(
                "NodeOptions: tick_ms, election_ticks > 1, heartbeat_ticks must be positive"
            )
        if self.heartbeat_ticks >= self.election_ticks:
            raise ValueError("NodeOptions: heartbeat_ticks must be below election_ticks")
        if self.max_pending_proposals <= 0 or self.proposal_timeout_s <= 0:
            raise ValueError(
                "NodeOptions: max_pending_proposals and proposal_timeout_s must be positive"
            )
        if self.snapshot_every_entries < 0 or self.snapshot_keep_entries < 0:
            raise ValueError("NodeOptions: snapshot settings must be >= 0")
