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
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from raftlog.core import AppendEntries, MemoryStorage, Message, RaftConfig, RawNode, Role
from raftlog.core.liveness import NodeLiveness, liveness_wakes
from raftlog.entry import EntryType, HardState
from raftlog.sim.group import SimGroup, SimNode
from raftlog.sim.invariants import Checker
from raftlog.transport.beats import (
    COALESCED_KINDS,
    HOST_GROUP_ID,
    Beats,
    BeatsResponse,
    coalesce,
    coalescible,
    expand,
    pack_rows,
    unpack_rows,
)

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


class SimCluster:
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
                    quiesce_ticks=params.quiesce_ticks,
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

    # ------------------------------------------------------------ lifecycle
    def _start(self, h: SimHost) -> None:
        h.up = True
        for sn in h.replicas.values():
            st = sn.storage
            snap = st.snapshot
            if snap.data:
                idx, dig = snap.data.split(b":", 1)
                sn.applied, sn.digest = int(idx), bytes.fromhex(dig.decode())
            else:
                sn.applied, sn.digest = snap.meta.index, b""
            cfg = replace(sn.cfg, applied=sn.applied)
            sn.node = RawNode(cfg, st, random.Random(self.rng.random()), st.hard_state)
            sn.pending = None
        if self.quiesce:
            # a new process: new nonce, liveness state from scratch
            r = self._nonce_rng
            h.nonce = r.randrange(1, 2**63)
            h.liveness = NodeLiveness(
                random.Random(r.random()), self.p.silence_ticks, self.p.election_tick
            )
            h.liveness.set_peers(h.peers)
            h.beaten = set()
        # first tick at a random phase so nodes' clocks are not aligned
        self.schedule(self.now + self.rng.randrange(1, TICK + 1), "tick", (h.id, h.gen))

    def crash(self, nid: int) -> None:
        h = self.hosts[nid]
        if not h.up:
            return
        unsynced = any(sn.pending is not None for sn in h.replicas.values())
        self.log(f"CRASH {nid} (losing unsynced ready: {unsynced})")
        h.up = False
        h.gen += 1
        if self.quiesce:
            # the kernel resets a killed process's connections: every peer that can
            # reach it sees its stream break (a partitioned one sees nothing)
            for o in self.live():
                if o.liveness is not None and self.connected(o.id, nid):
                    o.liveness.broken(nid)
        h.round_open = False  # the round in flight is lost: its Readies were never synced
        self._out.pop(nid, None)  # coalesced beats not flushed yet die with the process
        for gid, sn in h.replicas.items():
            sn.node = None
            sn.pending = None
            self.gs[gid].check.on_crash(nid)

    def restart(self, nid: int) -> None:
        h = self.hosts[nid]
        if h.up:
            return
        self._start(h)
        if self.multi:
            self.log(f"RESTART {nid}: {len(h.replicas)} groups")
        else:
            self.log(f"RESTART {nid}: {h.replicas[0].node}")
        for gid, sn in h.replicas.items():
            check = self.gs[gid].check
            check.on_restart(nid, sn.node)  # type: ignore[arg-type]
            if sn.applied:
                check.on_digest(nid, sn.applied, sn.digest)

    def _new_incarnation(self) -> int:
        return self._inc_rng.randrange(1, 2**63)

    LOSS_KINDS = ("all", "hard_state", "suffix", "middle", "middle_and_vote")
    """What a node's storage loses. suffix/middle: the real storage's repair
    (raftlog/storage/repair.py) keeps the intact prefix before a lost tail or a
    damaged range, with the snapshot and the vote record; middle_and_vote: the same
    with the index (hence the vote record and the commit checkpoint) lost too."""

    def lose_storage(self, nid: int, kind: str) -> bool:
        """Crash `nid` and damage its storage (`kind` in LOSS_KINDS) for every group
        on it; it stays down until restarted. Returns False (and does nothing) when
        some group could not vouch for its data: see `SimGroup.loss_allowed`."""
        h = self.hosts[nid]
        if not all(self.gs[gid].loss_allowed(nid) for gid in h.replicas):
            return False
        self.crash(nid)
        for sn in h.replicas.values():
            self._damage(sn, kind)
        if self.p.identity:
            h.incarnation = self._new_incarnation()
            for sn in h.replicas.values():
                sn.cfg = replace(sn.cfg, incarnation=h.incarnation)
        self.losses += 1
        for gid in h.replicas:
            self.gs[gid].check.on_storage_loss(nid)
        self.log(f"LOSE {kind} of {nid} (new incarnation {h.incarnation})")
        return True

    def _damage(self, sn: SimNode, kind: str) -> None:
        st = sn.storage
        if kind == "all":
            sn.storage = MemoryStorage()
        elif kind == "hard_state":
            st.hard_state = HardState()
        else:
            lo, hi = st.first_index(), st.last_index()
            if lo > hi:
                sn.storage = MemoryStorage()  # only a snapshot: lose it all
            else:
                # suffix: entries from k on are gone; middle: a damaged range
                # [k, k2] inside the log, of which only the prefix before k stays
                # usable (the log must stay contiguous)
                k = self.rng.randint(lo, hi)
                del st._ents[k - lo :]
                hs = st.hard_state
                if kind == "middle_and_vote":
                    # the vote record went with the index: the repaired node has no term,
                    # no vote and no commit checkpoint (it may never vote on them)
                    hs = HardState()
                st.hard_state = HardState(hs.term, hs.vote, min(hs.commit, st.last_index()))
        sn.applied, sn.digest = 0, b""

    # ------------------------------------------------------------- network
    def connected(self, a: int, b: int) -> bool:
        if self.cut is None:
            return True
        return any(a in g and b in g for g in self.cut)

    def send(self, m: Message) -> None:
        if isinstance(m, AppendEntries) and m.entries:
            grp = self.gs[m.group_id] if self.multi else self.gs[0]
            grp.check.check_entries(f"append {m.src}->{m.dst}", m.entries, m.prev_term)
        if self.coalesced and coalescible(m):
            # held for this node's flush, which runs after the events of this instant
            # (as the host's flush runs after the groups woken in one loop iteration)
            out = self._out.setdefault(m.src, [])
            if not out:
                self.schedule(self.now, "flush", m.src)
            out.append(m)
            return
        self._transmit(m)

    def _transmit(self, m: Message) -> None:
        """One network message: partition, drop, duplication and delay apply to it whole."""
        p = self.p
        if not self.connected(m.src, m.dst) or self.rng.random() < p.drop:
            return
        copies = 2 if self.rng.random() < p.dup else 1
        for _ in range(copies):
            delay = self.rng.randint(1, p.max_delay)
            if self.rng.random() < p.spike:
                delay += self.rng.randint(1, 20 * TICK)
            self.schedule(self.now + delay, "msg", m)
        if p.misroute and self.rng.random() < p.misroute:
            self._misroute(m)

    def _misroute(self, m: Message) -> None:
        """I8 fault: a stale routing table. A Beats gains a row for a group its
        destination does not host; any other message is also sent to a node that
        does not host its group."""
        if isinstance(m, Beats):
            foreign = [g.gid for g in self.gs if m.dst not in g.nodes]
            if foreign:
                gid = self.rng.choice(foreign)
                extra = replace(m, rows=[*m.rows, (gid, 1 + self.rng.randrange(9), 0, 0)])
                self.misrouted += 1
                self.schedule(self.now + self.rng.randint(1, self.p.max_delay), "msg", extra)
            return
        if m.type in COALESCED_KINDS:
            return
        others = sorted(set(self.hosts) - set(self.gs[m.group_id].nodes) - {m.src})
        if others and self.connected(m.src, dst := self.rng.choice(others)):
            self.misrouted += 1
            self.schedule(
                self.now + self.rng.randint(1, self.p.max_delay), "msg", replace(m, dst=dst)
            )

    def _flush(self, nid: int) -> None:
        """Node nid's held heartbeats leave coalesced: one message per peer (and identity)."""
        out = self._out.pop(nid, None)
        if not out or not self.hosts[nid].up:
            return
        h = self.hosts[nid]
        coalesced, other = coalesce(out, nid, h.nonce)
        assert not other, "only beats are held for the flush"
        if self.quiesce:
            h.beaten.update(m.dst for m in coalesced)
        self.beats_sent += len(coalesced)
        self.beat_rows_sent += len(out)
        for m in coalesced:
            self._transmit(m)

    def _deliver_beats(self, m: Beats | BeatsResponse) -> None:
        """Unpack (wire codec) and expand a coalesced message; step each row into
        its group's replica, dropping and counting rows for groups not hosted here."""
        rows = unpack_rows(int(m.type), pack_rows(m), m.dst)
        m = replace(m, rows=rows)  # type: ignore[arg-type]
        self.trace.append(f"t={self.now} {m.src}->{m.dst} {type(m).__name__} rows={len(rows)}")
        lv = self.hosts[m.dst].liveness
        if lv is not None and lv.heard(m.src, m.node_nonce):
            self.log(f"{m.dst} sees {m.src} restarted (new nonce)")
            self._liveness_wake(self.hosts[m.dst], {m.src}, {m.src})
        touched: dict[int, SimNode] = {}
        for hb in expand(m):
            sn = self._replica(hb.dst, hb.group_id)
            if sn is None:
                self.unknown_group_rows += 1
                continue
            sn.node.step(hb)  # type: ignore[union-attr]
            touched[hb.group_id] = sn
        for sn in touched.values():
            self._after(sn)

    def _replica(self, nid: int, gid: int) -> SimNode | None:
        """Node nid's live replica of group gid, None if nid does not host gid (I8)."""
        return self.hosts[nid].replicas.get(gid)

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

    # ----------------------------------------------------------- liveness
    def _liveness_tick(self, h: SimHost) -> None:
        """The host's _node_beats: node beats every node_beat_ticks to the peers no
        Beats went to, then the liveness clock; newly down peers wake groups."""
        lv = h.liveness
        assert lv is not None
        if (lv.now + 1) % self.p.node_beat_ticks == 0:
            for p in sorted(h.peers - h.beaten):
                self._transmit(
                    Beats(
                        src=h.id,
                        dst=p,
                        term=0,
                        group_id=HOST_GROUP_ID,
                        rows=[],
                        node_nonce=h.nonce,
                    )
                )
            h.beaten = set()
        down = lv.tick(lambda p: self.hosts[p].up and self.connected(h.id, p))
        if down:
            self.peers_declared_down += len(down)
            self.log(f"{h.id} declares {down} down")
            self._liveness_wake(h, set(down), set())

    def _liveness_wake(self, h: SimHost, gone: set[int], restarted: set[int]) -> None:
        assert h.liveness is not None
        quiet = [(sn, sn.node) for sn in h.replicas.values() if sn.node is not None]
        for sn, campaign in liveness_wakes(h.id, quiet, h.liveness.down, gone, restarted):
            self.liveness_wakes += 1
            self.log(f"g{sn.gid} {h.id} liveness wake (campaign={campaign})")
            sn.node.wake(campaign)  # type: ignore[union-attr]
            self._after(sn)

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

    # --------------------------------------------------------------- faults
    def partition(self) -> None:
        ids = list(self.hosts)
        self.rng.shuffle(ids)
        k = self.rng.randint(1, len(ids) - 1) if len(ids) > 1 else 1
        self.cut = [set(ids[:k]), set(ids[k:])]
        self.log(f"PARTITION {self.cut}")

    def isolate_leader(self) -> None:
        """Partition the leader (with many groups: the node leading the most) with a
        random minority (possibly alone)."""
        ld = self.leader_host()
        if ld is None:
            self.partition()
            return
        others = [i for i in self.hosts if i != ld.id]
        self.rng.shuffle(others)
        k = self.rng.randint(0, max(0, (len(self.hosts) - 1) // 2 - 1))
        minority = {ld.id, *others[:k]}
        self.cut = [minority, set(self.hosts) - minority]
        self.log(f"PARTITION (leader) {self.cut}")

    def heal(self) -> None:
        if self.cut is not None:
            self.log("HEAL")
        self.cut = None

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
