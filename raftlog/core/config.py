"""What a `RawNode` is configured with, and the errors its requests raise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class RandomSource(Protocol):
    """What the core needs from `random.Random` (injected; the core owns no RNG)."""

    def randrange(self, start: int, stop: int) -> int: ...


class RawNotLeaderError(Exception):
    """The core refuses a leader-only request. `leader` is the known leader id (0: unknown).

    Internal to raftlog: the runtime translates it into
    `raftlog.runtime.NotLeaderError` (which carries the leader's address), the
    only not-leader error applications see."""

    def __init__(self, leader: int) -> None:
        super().__init__(f"not the leader (leader hint: {leader or 'unknown'})")
        self.leader = leader


class ProposalDroppedError(Exception):
    """The leader refuses the proposal now (leadership transfer, config change)."""


class NotYetAdmissibleError(ProposalDroppedError):
    """A voter to add does not answer from its recorded incarnation yet (it is still
    catching up as a learner, or the leader has not recorded its storage): retry."""


@dataclass(slots=True)
class RaftConfig:
    """Configuration of one `RawNode` (etcd's `Config`). The runtime builds it from
    `raftlog.runtime.NodeOptions`; validated in `RawNode.__init__`."""

    id: int
    """This node's id (>= 1); unique within the group."""
    peers: Sequence[int] = ()
    """Initial voters, used only when neither the snapshot nor the log has a config."""
    learners: Sequence[int] = ()
    """Initial learners (non-voting replicas), under the same condition as peers."""
    incarnations: Mapping[int, int] = field(default_factory=dict)
    """Initial recorded incarnations of peers, under the same condition as peers
    (empty: none, the group is founded as docs/raft-core.md "Node identity" says).
    Given, the initial configuration is *sealed*: a member votes only from the
    storage recorded for it, so no founding round needs every voter. Safe only
    where every replica derives the same map from one committed decision and a
    storage can carry a recorded incarnation only if it never held the group's
    state (partition groups: the controller's placement entry records each
    replica's host incarnation, which only storage the host never had takes)."""
    election_tick: int = 10
    """T: followers campaign after a random timeout in [T, 2T) ticks."""
    heartbeat_tick: int = 1
    """A leader sends heartbeats every this many ticks; must be < election_tick.
    Heartbeats also carry the commit index to idle followers."""
    beats_yield_to_appends: bool = True
    """A heartbeat round leaves out a follower in REPLICATE that was sent an
    AppendEntries since the previous round (a heartbeat is an empty append, Raft
    5.2): the append already reset its election timer, its answer marks it active
    for CheckQuorum as a heartbeat's would, and it carried the commit index up to
    its entries. Never left out: a round that confirms a read (context), a quiesce
    beat, a round during a leadership transfer, a follower whose inflight window
    is full (a heartbeat answer frees it) or that is probing. A commit that
    advanced after the last append reaches such a follower with the next append,
    or with the next round (no append since): at most one more heartbeat interval
    late. False: every round beats every follower (etcd's behaviour)."""
    pre_vote: bool = True
    """Run a pre-election (Raft thesis 9.6) before incrementing the term: a node
    that cannot win (e.g. partitioned away) does not disrupt the leader by
    forcing a term bump when it rejoins."""
    check_quorum: bool = True
    """A leader steps down after election_tick ticks without hearing from a
    quorum, and followers that heard from a live leader within election_tick
    ignore votes (leader lease), so a deposed leader cannot serve stale reads."""
    max_msg_bytes: int = 1 << 20
    """Cap on the entry payload of one AppendEntries (at least one entry is sent)."""
    max_inflight_msgs: int = 256
    """Pipelined AppendEntries per follower in replicate state before the leader
    waits for acknowledgements (flow control; etcd's MaxInflightMsgs)."""
    max_inflight_bytes: int = 16 << 20
    """As max_inflight_msgs, in entry payload bytes in flight per follower."""
    max_committed_bytes: int = 16 << 20
    """Cap on committed_entries per Ready."""
    snapshot_chunk_bytes: int = 1 << 20
    """Bytes of snapshot data per InstallSnapshot message."""
    applied: int = 0
    """Index the state machine has already applied (e.g. its snapshot) on restart."""
    group_id: int = 0
    """The Raft group this node belongs to; stamped on every message it sends,
    so a transport shared by several groups can route (and reject) by group."""
    incarnation: int = 0
    """This node's storage incarnation (a random id made when the storage was
    created; 0 turns the identity rules off). Stamped on every message."""
    legacy: bool = False
    """The storage predates incarnations and adopted one at this start: until the
    membership records it, it may vote as before (rolling upgrade)."""
    quiesce_ticks: int = 0
    """Quiescence (docs/raft-runtime.md, "Quiescence"; 0: off): a leader idle for
    this many ticks, whose followers all hold and acknowledged its whole log,
    sends one quiesce beat and stops heartbeating; followers that agree stop
    their election timer. The runtime then stops ticking the group and watches
    the leader's process instead (node beats), calling wake()."""
