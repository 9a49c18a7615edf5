"""`Ready`: everything the runtime must do after the core changed state.

The runtime drives the core like this (one loop per Raft group)::

    node.step(msg) / node.tick() / node.propose(data) / ...   # any number of calls
    rd = node.ready()                                          # drain pending work
    send(rd.early_messages)              # may go before the disk write (leader only)
    if rd.snapshot: storage.apply_snapshot(rd.snapshot)         # 1. durable first
    storage.append(rd.entries)                                  # 2.
    if rd.hard_state: storage.set_hard_state(rd.hard_state)     # 3. then fsync
    send(rd.messages)                                           # 4. only after the fsync
    apply(rd.snapshot, rd.committed_entries); serve(rd.read_states)
    node.advance(rd)                                            # 5. report it all done

Readies must be processed in the order they were returned; a runtime may call
`ready()` again before advancing the previous one (pipelining) as long as it
persists and advances them in order. Instead of `advance`, a runtime that
persists on its own schedule may call `on_persisted(index, term)`,
`on_snapshot_persisted(index)`, `on_hard_state_persisted(hs)` and
`on_applied(index)` individually.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from raftlog.core.log_reader import Snapshot
from raftlog.core.messages import Message
from raftlog.entry import HardState, LogEntry


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class SoftState(NamedTuple):
    """Volatile state worth telling the application about (leader changes)."""

    lead: int
    role: Role


class ReadState(NamedTuple):
    """A linearizable read: once the local applied index reaches `index`, a read
    of the state machine issued for `context` observes every write committed
    before the read was requested."""

    index: int
    context: bytes


@dataclass(slots=True)
class Ready:
    soft_state: SoftState | None = None
    """New (leader, role) if it changed. Not persisted. Use for on_leader_start/stop."""

    hard_state: HardState | None = None
    """(term, vote, commit) to persist if not None. term and vote MUST be durable
    before any of `messages` is sent (a vote, or an append accepted in a term, must
    survive a crash). The commit field is a checkpoint only."""

    snapshot: Snapshot | None = None
    """A snapshot received from the leader: persist it (replacing the log) BEFORE
    `entries`, and load it into the state machine before applying
    `committed_entries`. The applied index jumps to snapshot.meta.index."""

    entries: list[LogEntry] = field(default_factory=list)
    """Entries to append durably. entries[0].index may be <= the stored last
    index: the stored suffix from there is replaced (truncated, then appended).
    MUST be durable before `messages` is sent. The leader counts its own copy
    toward the commit quorum only after `advance`/`on_persisted` reports it."""

    early_messages: list[Message] = field(default_factory=list)
    """Messages that may be sent right away, before this Ready's writes are
    durable: a leader's AppendEntries/Heartbeat/InstallSnapshot/TimeoutNow
    (braft's parallel persist). Only non-empty when the leader's term and vote
    are already durable (reported by an earlier advance)."""

    messages: list[Message] = field(default_factory=list)
    """Messages to send AFTER hard_state, snapshot and entries are durable
    (responses acknowledging entries, granted votes, vote requests)."""

    committed_entries: list[LogEntry] = field(default_factory=list)
    """Committed entries to apply, in order, after the writes of this Ready (and
    of every earlier Ready) are durable. Contiguous and gap-free across Readies."""

    read_states: list[ReadState] = field(default_factory=list)
    """Confirmed ReadIndex requests; serve each once applied >= its index."""

    def __bool__(self) -> bool:
        return bool(
            self.soft_state
            or self.hard_state
            or self.snapshot
            or self.entries
            or self.early_messages
            or self.messages
            or self.committed_entries
            or self.read_states
        )
