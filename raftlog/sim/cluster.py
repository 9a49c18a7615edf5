"""Deterministic discrete-event simulation of a Raft cluster.

Everything random comes from one `random.Random(seed)`; time is an integer
counter (`TICK` units per Raft tick); there are no threads, sleeps or clocks, so
a seed replays exactly.

The simulated runtime follows the `Ready` contract with a real disk's timing:
a node takes one Ready at a time, sends its early messages at once, and only
after a random fsync delay persists it to its `MemoryStorage`, sends the other
messages, applies committed entries and advances. A crash in between loses
that Ready (unsynced writes) together with the in-memory state machine; a
restart rebuilds the node from what was persisted. With many groups the fsync is
the node's: one disk round at a time makes every group's pending Ready durable
together, and a crash loses the round in flight for every group.

Faults: message drop, duplication, random delay (hence reordering), network
partitions, crashes/restarts, compaction (forcing InstallSnapshot), leader
transfers, ReadIndex requests and single-server membership changes, and storage
loss (`lose_storage`): a node loses its whole storage, its hard state (vote
record), or its log from some index on (a lost suffix, or a damaged range in the
middle of which only the intact prefix is kept). With `identity` on, a node whose
storage lost anything restarts under a new incarnation, as the real storage layer
does (raftlog/storage/identity.py), and must be re-admitted before it votes.

Many groups (`SimParams.groups` > 1, `python -m raftlog.sim --groups G`): every
node hosts a replica of each group placed on it (group g on `voters + spares`
consecutive nodes from node g mod N, round robin, so with `extra_nodes` > 0 a node
hosts only some groups). Faults stay per NODE, as on a real machine: a crash stops
every replica on the node and loses each one's unsynced Ready, a partition cuts
node pairs for all groups, a storage loss damages every group's storage on the
node (which then restarts under one new incarnation). A node ticks all its
replicas together; their heartbeats and heartbeat responses leave through the
real coalescer (`raftlog.transport.beats.coalesce`: one Beats/BeatsResponse per
peer per flush), travel as ONE network message (dropped, duplicated, delayed as a
whole), are packed and unpacked with the wire codec and expanded with
`beats.expand` on arrival, exactly as `raftlog/runtime/host.py` does. A message
or a beat row for a group the receiving node does not host is dropped and counted
(I8, `unknown_group_msgs` / `unknown_group_rows`), never delivered; the
`misroute` fault sends such messages on purpose.

Quiescence (`quiesce_ticks` > 0; docs/raft-runtime.md, "Quiescence"): idle
leaders quiesce (the core's rule) and every node keeps a real `NodeLiveness`
(raftlog/core/liveness.py) as the host does: node beats (empty Beats with the
node's start nonce, every `node_beat_ticks` to each peer no Beats went to) travel
as network messages (dropped, delayed, cut by partitions); a crash resets the
connections of the peers that can reach the node (the broken-stream evidence);
a restart makes a new nonce; the quiesced replicas to wake are `liveness_wakes`'
choice, as in the host. Heartbeats then travel coalesced even with one group.

Invariants with one group, kept byte for byte: with `groups == 1` the random
streams, the event order and the trace are those of the single-group simulator
(nothing draws from the seed's random stream only because groups exist).

SimCluster is one class in five modules, one part each; the parts hold no state
of their own (every field is set in SimCluster.__init__): the network and its
partition faults (cluster_network.py), the coalesced heartbeats and node
liveness (cluster_beats.py), node starts, crashes and restarts
(cluster_lifecycle.py) and storage loss (cluster_storage_loss.py). This module
keeps the fields, the single-group view, the Readies and their disk rounds, and
the event loop. TICK, SimParams, SimHost and placement live in params.py and are
imported from here as before.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from raftlog.core import Message, RaftConfig, Role
from raftlog.core.liveness import liveness_wakes
from raftlog.entry import EntryType
from raftlog.sim.cluster_beats import SimBeats
from raftlog.sim.cluster_lifecycle import SimLifecycle
from raftlog.sim.cluster_network import SimNetwork
from raftlog.sim.cluster_storage_loss import SimStorageLoss
from raftlog.sim.group import SimGroup, SimNode
from raftlog.sim.invariants import Checker
from raftlog.sim.params import TICK, SimHost, SimParams, placement
from raftlog.transport.beats import COALESCED_KINDS


class SimCluster(SimNetwork, SimBeats, SimLifecycle, SimStorageLoss):
    def __init__(self, seed: int, params: SimParams, trace_len: int = 80) -> None:
        self.seed = seed
        self.p = params
        self.rng = random.Random(seed)
        self.now = 0
        self._seq = 0
        self._events: list[tuple[int, int, str, Any]] = []
        self.trace: deque[str] = deque(maxlen=trace_len)
        self.verbose = False
        self.cut: list[set[int]] | None = None  # partition, None = healed
        self.losses = 0
        self.multi = params.groups > 1
        self.quiesce = params.quiesce_ticks > 0
        self.coalesced = (self.multi or self.quiesce) and params.coalesce
        self.liveness_wakes = 0
        self.peers_declared_down = 0
        # nonces and liveness draws from their own stream (quiescence off: untouched)
        self._nonce_rng = random.Random(f"nonces-{seed}")
        # I8 and coalescing counters (multi-group only)
        self.unknown_group_msgs = 0
        self.unknown_group_rows = 0
        self.misrouted = 0
        self.beats_sent = 0
        self.beat_rows_sent = 0
        self.disk_rounds = 0
        self._out: dict[int, list[Message]] = {}
        # incarnations come from their own stream so the fault schedule of a seed
        # does not depend on them
        self._inc_rng = random.Random(f"incarnations-{seed}")
        size = params.voters + params.spares
        n_hosts = size + (params.extra_nodes if self.multi else 0)
        self.hosts: dict[int, SimHost] = {}
        for i in range(1, n_hosts + 1):
            inc = self._new_incarnation() if params.identity else 0
            self.hosts[i] = SimHost(i, inc)
        self.gs: list[SimGroup] = []
        for g in range(params.groups):
            grp = SimGroup(self, g, tag=f"g{g}:".encode() if self.multi else b"")
            ids = placement(g, n_hosts, size)
            voters = tuple(ids[: params.voters])
            for i in ids:
                cfg = RaftConfig(
                    id=i,
                    peers=voters if i in voters else (),
                    election_tick=params.election_tick,
                    heartbeat_tick=params.heartbeat_tick,
                    pre_vote=params.pre_vote,
                    check_quorum=params.check_quorum,
                    max_msg_bytes=params.max_msg_bytes,
                    max_inflight_msgs=params.max_inflight_msgs,
                    max_inflight_bytes=params.max_inflight_bytes,
                    snapshot_chunk_bytes=params.snapshot_chunk_bytes,
                    group_id=g,
                    incarnation=self.hosts[i].incarnation,
                    incarnations=(
                        {v: self.hosts[v].incarnation for v in voters}
                        if params.sealed and params.identity and i in voters
                        else {}
                    ),
                    quiesce_ticks=params.quiesce_ticks,
                    beats_yield_to_appends=params.beats_yield_to_appends,
                )
                grp.nodes[i] = SimNode(i, cfg, gid=g)
            self.gs.append(grp)
        for h in self.hosts.values():
            h.replicas = {g.gid: g.nodes[h.id] for g in self.gs if h.id in g.nodes}
            h.peers = {i for g in self.gs if h.id in g.nodes for i in g.nodes} - {h.id}
            self._start(h)

    # ---------------------------------------------- the single-group view
    # With one group (the classic simulator and its tests) the cluster reads as
    # that group: nodes, check, leader() and the client actions are group 0's.
    @property
    def nodes(self) -> dict[int, SimNode]:
        return self.gs[0].nodes

    @property
    def check(self) -> Checker:
        return self.gs[0].check

    @property
    def groups(self) -> list[set[int]] | None:
        """The current partition (kept under its old name for callers)."""
        return self.cut

    def leader(self) -> SimNode | None:
        return self.gs[0].leader()

    def pick(self) -> SimGroup:
        """The group a client action targets: a random one (no draw with one group)."""
        return self.gs[0] if not self.multi else self.rng.choice(self.gs)

    def propose(self, data: bytes | None = None) -> bool:
        return self.pick().propose(data)

    def read(self) -> None:
        self.pick().read()

    def transfer(self) -> None:
        self.pick().transfer()

    def compact(self) -> None:
        self.pick().compact()

    def reconfigure(self) -> None:
        self.pick().reconfigure()

    # ------------------------------------------------------------ utilities
    def log(self, s: str) -> None:
        line = f"t={self.now} {s}"
        self.trace.append(line)
        if self.verbose:
            print(line)

    def schedule(self, at: int, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, payload))

    def live(self) -> list[SimHost]:
        return [h for h in self.hosts.values() if h.up]

    def leader_host(self) -> SimHost | None:
        """The node leading the most groups (ties: the lowest id); None if none leads."""
        counts: dict[int, int] = {}
        for g in self.gs:
            ld = g.leader()
            if ld is not None:
                counts[ld.id] = counts.get(ld.id, 0) + 1
        if not counts:
            return None
        best = max(sorted(counts), key=lambda i: counts[i])
        return self.hosts[best]

    # -------------------------------------------------------------- readies
    def _pump(self, sn: SimNode) -> None:
        """Take the replica's next Ready if none is being persisted; it joins its
        node's disk round (one is started if none is in flight)."""
        node = sn.node
        if node is None or sn.pending is not None or not node.has_ready():
            return
        rd = node.ready()
        sn.pending = rd
        for m in rd.early_messages:
            self.send(m)
        h = self.hosts[sn.id]
        if not h.round_open:
            h.round_open = True
            self.schedule(
                self.now + self.rng.randint(0, self.p.fsync_max), "persist", (sn.id, h.gen)
            )

    def _after(self, sn: SimNode) -> None:
        node = sn.node
        if node is not None:
            if node.quiesced and node.role is Role.LEADER:
                # the host's _on_quiesce_change: a leader quiescing while peers are
                # down may have no live quorum; then it must run CheckQuorum
                lv = self.hosts[sn.id].liveness
                if lv is not None and lv.down:
                    for _, _c in liveness_wakes(sn.id, [(sn, node)], lv.down, set()):
                        self.log(f"g{sn.gid} {sn.id} quiesced leader without a live quorum: wake")
                        self.liveness_wakes += 1
                        node.wake()
            self._pump(sn)
            self.gs[sn.gid].check.check_node(sn.id, sn.node)

    # --------------------------------------------------------------- driver
    def run_until(self, end: int, stop: Callable[[], bool] | None = None) -> bool:
        """Process events up to time `end`; True if `stop()` became true first."""
        ev = self._events
        while ev and ev[0][0] <= end:
            at, _, kind, payload = heapq.heappop(ev)
            self.now = at
            self._handle(kind, payload)
            if stop is not None and stop():
                return True
        self.now = max(self.now, end)
        return False

    def _handle(self, kind: str, payload: Any) -> None:
        if kind == "msg":
            m: Message = payload
            if not self.hosts[m.dst].up:
                return
            if m.type in COALESCED_KINDS:
                self._deliver_beats(m)  # type: ignore[arg-type]
                return
            sn = self._replica(m.dst, m.group_id)
            if sn is None:
                self.unknown_group_msgs += 1  # I8: dropped and counted, never delivered
                self.trace.append(f"t={self.now} {m.src}->{m.dst} DROP g{m.group_id} not hosted")
                return
            if self.verbose:
                self.log(f"{m.src}->{m.dst} {type(m).__name__} {_fmt(m)}")
            else:
                self.trace.append(f"t={self.now} {m.src}->{m.dst} {type(m).__name__} {_fmt(m)}")
            sn.node.step(m)  # type: ignore[union-attr]
            self._after(sn)
        elif kind == "tick":
            nid, gen = payload
            h = self.hosts[nid]
            if h.gen != gen or not h.up:
                return
            if h.liveness is not None:
                self._liveness_tick(h)
            # every replica of the node ticks at the same instant (one host tick loop)
            for sn in h.replicas.values():
                node = sn.node
                assert node is not None
                before = node.role
                node.tick()
                if node.role is not before:
                    g = f"g{sn.gid} " if self.multi else ""
                    self.log(f"{g}{nid} {before.value} -> {node}")
            self.schedule(self.now + TICK, "tick", (nid, gen))
            for sn in h.replicas.values():
                self._after(sn)
        elif kind == "persist":
            # the node's disk round ends: ONE fsync makes every Ready taken so far
            # durable, for all its groups (raftlog/storage DiskWriter rounds)
            nid, gen = payload
            h = self.hosts[nid]
            if h.gen != gen or not h.up:
                return
            h.round_open = False
            done = [sn for sn in h.replicas.values() if sn.pending is not None]
            if self.multi:
                self.disk_rounds += 1
            for sn in done:
                self.gs[sn.gid].persist(sn)
            for sn in done:
                self._after(sn)
        elif kind == "flush":
            self._flush(payload)
        elif kind == "call":
            payload()
        else:  # pragma: no cover
            raise ValueError(kind)

    def after_local_call(self, sn: SimNode) -> None:
        self._after(sn)

    def state(self) -> str:
        return "\n".join(g.state() for g in self.gs)


def _fmt(m: Message) -> str:
    d = {f.name: getattr(m, f.name) for f in fields(m) if f.name not in ("src", "dst", "group_id")}
    if "entries" in d:
        es = d["entries"]
        d["entries"] = f"[{es[0].index}..{es[-1].index}]" if es else "[]"
    if "data" in d:
        d["data"] = len(d["data"])
    return " ".join(f"{k}={v}" for k, v in d.items())


__all__ = ["TICK", "EntryType", "SimCluster", "SimHost", "SimNode", "SimParams", "placement"]
