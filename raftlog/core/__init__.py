"""Pure Raft: no I/O, no clock, no threads, no randomness of its own.

Drive a `RawNode` with `step(msg)`, `tick()` and local requests, collect work
with `ready()`, perform it in the order `Ready` documents, then `advance(rd)`.
Stable entries are read through a `LogReader` the runtime implements over its
storage; `MemoryStorage` is the in-memory reference used by tests and the
simulator. See docs/raft-core.md.
"""

from raftlog.core.config import (
    NotYetAdmissibleError,
    ProposalDroppedError,
    RaftConfig,
    RandomSource,
    RawNotLeaderError,
)
from raftlog.core.log_reader import LogReader, MemoryStorage, Snapshot, entry_size
from raftlog.core.membership import Membership, is_single_step
from raftlog.core.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    MsgType,
    ReadIndex,
    ReadIndexResponse,
    RequestVote,
    RequestVoteResponse,
    TimeoutNow,
)
from raftlog.core.node_state import RawNode
from raftlog.core.progress import Inflights, Progress, ProgressState
from raftlog.core.raft_log import RaftLog, RaftSafetyError
from raftlog.core.ready import ReadState, Ready, Role, SoftState

__all__ = [
    "AppendEntries",
    "AppendEntriesResponse",
    "Heartbeat",
    "HeartbeatResponse",
    "Inflights",
    "InstallSnapshot",
    "InstallSnapshotResponse",
    "LogReader",
    "Membership",
    "MemoryStorage",
    "Message",
    "MsgType",
    "NotYetAdmissibleError",
    "Progress",
    "ProgressState",
    "ProposalDroppedError",
    "RaftConfig",
    "RaftLog",
    "RaftSafetyError",
    "RandomSource",
    "RawNode",
    "RawNotLeaderError",
    "ReadIndex",
    "ReadIndexResponse",
    "ReadState",
    "Ready",
    "RequestVote",
    "RequestVoteResponse",
    "Role",
    "Snapshot",
    "SoftState",
    "TimeoutNow",
    "entry_size",
    "is_single_step",
]
