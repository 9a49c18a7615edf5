"""The asyncio runtime around the pure Raft core: storage, transport, FSM calls.

Public surface:
    RaftHost        one per process: hosts many groups over one transport, one tick
                    loop, one disk writer (one fsync round) and one data directory;
                    add_group / remove_group / stop; heartbeats coalesced per peer
    RaftGroup       one group's replica in a host: apply / read_index / transfer_leader /
                    status; reads: term, commit_index, applied, leader_id, last_leader_id,
                    leader_epoch(), is_leader(), membership(), first_index(), read_committed()
    RaftNode        the single-group API: a RaftGroup with its own host (start/stop)
    HostOptions     what a host shares among its groups
    StateMachine    the callbacks an application implements (braft's FSM)
    ApplyResult     (index, term, result) of an applied proposal
    NodeOptions     typed configuration
    stall_watch     GC pauses and event-loop lag of the process (install, installed)
    errors          NotLeaderError, LeaderChangedError, ProposalTimeoutError, BusyError, NodeStoppedError;
                    LogRangeError (raftlog.storage's, raised by read_committed)
"""

from raftlog.runtime import stall_watch
from raftlog.runtime.errors import (
    BusyError,
    LeaderChangedError,
    NodeStoppedError,
    NotLeaderError,
    ProposalTimeoutError,
    RaftError,
)
from raftlog.runtime.group import NodeStats, RaftGroup
from raftlog.runtime.host import HostStats, RaftHost
from raftlog.runtime.node import RaftNode
from raftlog.runtime.options import HostOptions, NodeOptions
from raftlog.runtime.snapshots import SnapshotStore, check_snapshot_files
from raftlog.runtime.state_machine import ApplyResult, StateMachine
from raftlog.storage import LogRangeError

__all__ = [
    "ApplyResult",
    "BusyError",
    "HostOptions",
    "HostStats",
    "LeaderChangedError",
    "LogRangeError",
    "NodeOptions",
    "NodeStats",
    "NodeStoppedError",
    "NotLeaderError",
    "ProposalTimeoutError",
    "RaftError",
    "RaftGroup",
    "RaftHost",
    "RaftNode",
    "SnapshotStore",
    "StateMachine",
    "check_snapshot_files",
    "stall_watch",
]
