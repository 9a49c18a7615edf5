"""What a simulated cluster is made of (raftlog.sim.cluster): its time unit (TICK),
its parameters (SimParams), its machines (SimHost) and where each group's
replicas go (placement). Plain data, imported by SimCluster and its parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftlog.core.liveness import NodeLiveness
from raftlog.sim.group import SimNode

TICK = 10
"""Simulated time units per Raft tick."""


@dataclass
class SimParams:
    voters: int = 3
    spares: int = 0
    """Extra node ids that start outside the cluster (for membership changes)."""
    election_tick: int = 10
    heartbeat_tick: int = 2
    pre_vote: bool = True
    check_quorum: bool = True
    max_msg_bytes: int = 256
    max_inflight_msgs: int = 4
    max_inflight_bytes: int = 1024
    snapshot_chunk_bytes: int = 24
    drop: float = 0.0
    dup: float = 0.0
    max_delay: int = 6
    spike: float = 0.0
    """Probability that a message is delayed by up to 20 ticks (reordering)."""
    fsync_max: int = 4
    crash_weight: int = 3
    """Relative frequency of crashes among the chaos actions."""
    leader_bias: float = 0.0
    """Probability that a crash or partition targets the current leader."""
    identity: bool = False
    """Nodes run with incarnations (docs/raft-core.md, "Node identity")."""
    sealed: bool = False
    """With identity: every group starts from a configuration that records its voters'
    incarnations (RaftConfig.incarnations, partition groups' sealed start) instead of
    founding; a storage lost since is a replacement like any other."""
    storage_loss_weight: int = 0
    """Relative frequency of storage-loss faults among the chaos actions."""
    loss_kinds: tuple[str, ...] = ("all", "hard_state", "suffix", "middle")
    """The storage-loss kinds chaos picks from (SimCluster.LOSS_KINDS). The default keeps
    the seeds' random streams of before middle_and_vote; tests/sim/test_sim_storage_loss.py
    adds it."""
    groups: int = 1
    """Raft groups (1: the single-group simulator, unchanged)."""
    extra_nodes: int = 0
    """With groups > 1: nodes beyond one group's voters + spares, so each node hosts
    only the groups placed on it."""
    misroute: float = 0.0
    """With groups > 1: probability that a sent message also goes to a node that does
    not host its group (or that a coalesced beat gains a row for such a group): I8."""
    coalesce: bool = True
    """With groups > 1: heartbeats travel coalesced per node pair (transport/beats.py)."""
    quiesce_ticks: int = 0
    """Quiescence and node liveness (0: off, and the seeds' streams are those of before)."""
    silence_ticks: int = 30
    """Node liveness: silence limit S in ticks (drawn in [S, 1.5 S]); a broken stream
    counts after election_tick silent ticks."""
    node_beat_ticks: int = 2
    beats_yield_to_appends: bool = True
    """RaftConfig.beats_yield_to_appends (False: every heartbeat round beats every
    follower; the regression seeds recorded before it existed replay with False)."""


@dataclass
class SimHost:
    """A simulated machine: up or down as a whole, with a replica of each group placed on it."""

    id: int
    incarnation: int = 0
    """The node's storage incarnation, shared by all its groups (0: identity off)."""
    up: bool = True
    gen: int = 0
    """Incremented on crash so stale tick/persist events are ignored."""
    round_open: bool = False
    """A disk round (one fsync for every group's pending Ready) is in flight."""
    replicas: dict[int, SimNode] = field(default_factory=dict)
    """gid -> this node's replica of that group, in gid order."""
    peers: set[int] = field(default_factory=set)
    """Nodes hosting a replica of a group this node hosts."""
    nonce: int = 0
    """Start nonce of the current process (quiescence only; new at every start)."""
    liveness: NodeLiveness | None = None
    beaten: set[int] = field(default_factory=set)
    """Peers a Beats went to since the last node beats."""


def placement(gid: int, hosts: int, size: int) -> list[int]:
    """Node ids of group gid's replicas: `size` consecutive nodes from gid mod hosts
    (round robin, so replicas and the first voter, a likely leader, spread)."""
    return [(gid + k) % hosts + 1 for k in range(size)]
