"""The log entry and hard-state value types shared by the Raft core and storage.

Pure data: no I/O. Both `raftlog.core` (which must not touch the disk) and
`raftlog.storage` (which persists these values) import from here.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class EntryType(enum.IntEnum):
    """Kind of a log entry; stored as one byte in the segment frame."""

    DATA = 1
    """An application command, handed to the state machine's on_apply."""
    NOOP = 2
    """The empty entry a new leader appends to commit the previous terms' entries."""
    CONFIG = 3
    """A membership change (voters, learners, joint configuration)."""


class LogEntry(NamedTuple):
    """One entry of the replicated log.

    index starts at 1 and is dense: entry i+1 follows entry i with no gap.
    term never decreases along the log.
    """

    index: int
    term: int
    type: EntryType
    data: bytes


class HardState(NamedTuple):
    """State that must be durable before any message that depends on it is sent.

    term: the latest term this node has seen.
    vote: the node voted for in `term`, 0 for none (node ids are >= 1).
    commit: a checkpoint of the commit index. Not required for safety (the
        commit index is recovered from the leader), but it lets a restarted
        node re-apply up to a known point without waiting for a leader.
    """

    term: int = 0
    vote: int = 0
    commit: int = 0


class SnapshotMeta(NamedTuple):
    """What the log knows about the latest snapshot: the entry it replaces.

    index/term: the last log entry included in the snapshot (0/0 for none).
    data: opaque bytes owned by the layer above (membership at that index).
    """

    index: int = 0
    term: int = 0
    data: bytes = b""
