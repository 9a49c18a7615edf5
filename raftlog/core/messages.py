"""Raft wire messages as plain data.

Every message carries `group_id` (multi-raft), `src`, `dst` and `term`. A message
with term 0 is "term-less": only `ReadIndex` (a follower forwarding a read to the
leader) uses it, so it is never rejected for a stale term and never bumps one.

The transport serialises these however it likes; the core only needs the fields.
Fields are explicit and flat so a protobuf mapping is one line per field.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar

from raftlog.entry import LogEntry

IDENTITY_SEALED = 1
"""Header flag: the sender's membership records incarnations (the cluster was founded)."""
IDENTITY_LEGACY = 2
"""Header flag: the sender's storage predates incarnations (adopted one at start)."""
IDENTITY_FLAGS = IDENTITY_SEALED | IDENTITY_LEGACY


class MsgType(enum.IntEnum):
    """Discriminator of a message; `msg.type` is a class attribute of each kind."""

    APPEND = 1
    APPEND_RESP = 2
    VOTE = 3
    VOTE_RESP = 4
    HEARTBEAT = 5
    HEARTBEAT_RESP = 6
    SNAPSHOT = 7
    SNAPSHOT_RESP = 8
    TIMEOUT_NOW = 9
    READ_INDEX = 10
    READ_INDEX_RESP = 11


@dataclass(slots=True, kw_only=True)
class Message:
    """Common header. `term` is the sender's current term (0: term-less).

    `incarnation` is the sender's storage incarnation (0: identity off) and
    `identity` its IDENTITY_* flags; the core stamps both on everything it sends
    (see RawNode.may_vote)."""

    type: ClassVar[MsgType]
    src: int
    dst: int
    term: int
    group_id: int = 0
    incarnation: int = 0
    identity: int = 0


@dataclass(slots=True, kw_only=True)
class AppendEntries(Message):
    """Leader -> follower: entries following (prev_index, prev_term), plus commit.

    `commit` is the leader's commit index; the follower commits
    min(commit, prev_index + len(entries)) so it never commits what it has not
    verified to match the leader.
    """

    type: ClassVar[MsgType] = MsgType.APPEND
    prev_index: int
    prev_term: int
    entries: list[LogEntry] = field(default_factory=list)
    commit: int = 0


@dataclass(slots=True, kw_only=True)
class AppendEntriesResponse(Message):
    """Follower -> leader, sent only after the appended entries are durable.

    Success: `index` is the last index known to match the leader
    (prev_index + len(entries), or the follower's commit index if the request was
    older than it).
    Reject: `index` echoes the rejected prev_index; `reject_hint` is the largest
    index <= min(prev_index, follower's last index) whose term is <= the leader's
    prev_term, and `log_term` its term (0 if unknown), so the leader can skip a
    whole divergent term per round trip.
    """

    type: ClassVar[MsgType] = MsgType.APPEND_RESP
    index: int
    reject: bool = False
    reject_hint: int = 0
    log_term: int = 0


@dataclass(slots=True, kw_only=True)
class RequestVote(Message):
    """Candidate -> voter. With `pre_vote`, `term` is the term the sender *would*
    campaign in (its term + 1) and neither side changes its persistent state.

    `transfer` marks a campaign started by TimeoutNow: it bypasses the leader
    lease a voter otherwise enforces (CheckQuorum).
    """

    type: ClassVar[MsgType] = MsgType.VOTE
    last_index: int
    last_term: int
    pre_vote: bool = False
    transfer: bool = False
    voter_incarnation: int = 0
    """The incarnation the candidate's membership records for the voter (0: none):
    a voter that has not yet received the configuration admitting it learns
    here that the cluster vouches for its storage."""
    candidate_admitted: bool = False
    """The candidate's own membership records its current incarnation (a leader admitted
    this storage through the log). A voter whose membership has not caught up with that
    admission trusts it for a candidate whose log is at least as up to date as its own
    (so the candidate's membership is the newer one); a replacement never sets it."""


@dataclass(slots=True, kw_only=True)
class RequestVoteResponse(Message):
    """Voter -> candidate. A granted (real) vote is sent only once durable."""

    type: ClassVar[MsgType] = MsgType.VOTE_RESP
    granted: bool
    pre_vote: bool = False


@dataclass(slots=True, kw_only=True)
class Heartbeat(Message):
    """Leader -> follower. `commit` is min(follower's match, leader commit), so a
    follower never commits an entry it has not been verified to hold.
    `context` is the newest ReadIndex sequence number the beat confirms (0: none).
    `quiesce`: the leader stops heartbeating this group after this beat; a
    follower at the same term whose log ends at `commit` quiesces too (and does
    not answer), any other follower answers (HeartbeatResponse.quiesce), which
    wakes the leader.
    """

    type: ClassVar[MsgType] = MsgType.HEARTBEAT
    commit: int = 0
    context: int = 0
    quiesce: bool = False


@dataclass(slots=True, kw_only=True)
class HeartbeatResponse(Message):
    """Follower -> leader; echoes `context`.
    `quiesce`: the answer to a quiesce beat, which a follower sends only when it
    does not agree to quiesce; it wakes a quiesced leader. An answer without it
    (to a beat sent before the quiesce beat, arriving late) says nothing the
    quiesced leader does not know and leaves it quiesced.
    """

    type: ClassVar[MsgType] = MsgType.HEARTBEAT_RESP
    context: int = 0
    quiesce: bool = False


@dataclass(slots=True, kw_only=True)
class InstallSnapshot(Message):
    """Leader -> follower: one chunk of the snapshot (index, snap_term).

    `offset` is the byte offset of `data` in the snapshot's application data;
    `done` marks the last chunk. `meta_data` (membership at `index`) rides on
    every chunk so any chunk is self-describing.
    """

    type: ClassVar[MsgType] = MsgType.SNAPSHOT
    index: int
    snap_term: int
    offset: int
    data: bytes
    done: bool
    meta_data: bytes = b""


@dataclass(slots=True, kw_only=True)
class InstallSnapshotResponse(Message):
    """Follower -> leader: the byte offset it expects next for snapshot `index`.

    After the final chunk the follower instead answers, once the snapshot is
    durable, with an AppendEntriesResponse(index=snapshot index).
    """

    type: ClassVar[MsgType] = MsgType.SNAPSHOT_RESP
    index: int
    next_offset: int


@dataclass(slots=True, kw_only=True)
class TimeoutNow(Message):
    """Leader -> transferee: campaign now, bypassing PreVote and the lease."""

    type: ClassVar[MsgType] = MsgType.TIMEOUT_NOW


@dataclass(slots=True, kw_only=True)
class ReadIndex(Message):
    """Follower -> leader (term 0): ask for a linearizable read index for `context`."""

    type: ClassVar[MsgType] = MsgType.READ_INDEX
    context: bytes = b""


@dataclass(slots=True, kw_only=True)
class ReadIndexResponse(Message):
    """Leader -> follower: `index` is safe to read once applied."""

    type: ClassVar[MsgType] = MsgType.READ_INDEX_RESP
    index: int
    context: bytes = b""


RESPONSE_TYPES = frozenset(
    {
        MsgType.APPEND_RESP,
        MsgType.VOTE_RESP,
        MsgType.HEARTBEAT_RESP,
        MsgType.SNAPSHOT_RESP,
        MsgType.READ_INDEX_RESP,
    }
)
"""Kinds that answer a request."""

LEADER_TYPES = frozenset({MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT, MsgType.TIMEOUT_NOW})
"""Kinds only a leader sends; receiving one from a newer term names the leader."""
