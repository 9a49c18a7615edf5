"""The asyncio runtime around the pure Raft core: storage, transport, FSM calls.

Public surface:
    RaftNode        one node of one group: apply / read_index / transfer_leader / status;
                    reads: term, commit_index, applied, leader_id, last_leader_id,
                    is_leader(), membership(), first_index(), read_committed()
    StateMachine    the callbacks an application implements (braft's FSM)
    ApplyResult     (index, term, result) of an applied proposal
    NodeOptions     typed configuration
    errors          NotLeaderError, LeaderChangedError, ProposalTimeoutError, BusyError, NodeStoppedError;
                    LogRangeError (raftlog.storage's, raised by read_committed)
"""

from raftlog.runtime.errors import (
    BusyError,
    LeaderChangedError,
    NodeStoppedError,
    NotLeaderError,
    ProposalTimeoutError,
    RaftError,
)
from raftlog.runtime.node import NodeStats, RaftNode
from raftlog.runtime.options import NodeOptions
from raftlog.runtime.snapshots import SnapshotStore
from raftlog.runtime.state_machine import ApplyResult, StateMachine
from raftlog.storage import LogRangeError

__all__ = [
    "ApplyResult",
    "BusyError",
    "LeaderChangedError",
    "LogRangeError",
    "NodeOptions",
    "NodeStats",
    "NodeStoppedError",
    "NotLeaderError",
    "ProposalTimeoutError",
    "RaftError",
    "RaftNode",
    "SnapshotStore",
    "StateMachine",
]
