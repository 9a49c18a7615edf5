"""Deterministic discrete-event simulation of a Raft cluster.

Everything random comes from one `random.Random(seed)`; time is an integer
counter (`TICK` units per Raft tick); there are no threads, sleeps or clocks, so
a seed replays exactly.

The simulated runtime follows the `Ready` contract with a real disk's timing:
a node takes one Ready at a time, sends its early messages at once, and only
after a random fsync delay persists it to its `MemoryStorage`, sends the other
messages, applies committed entries and advances. A crash in between loses
that Ready (unsynced writes) together with the in-memory state machine; a
restart rebuilds the node from what was persisted.

Faults: message drop, duplication, random delay (hence reordering), network
partitions, crashes/restarts, compaction (forcing InstallSnapshot), leader
transfers, ReadIndex requests and single-server membership changes, and storage
loss (`lose_storage`): a node loses its whole storage, its hard state (vote
record), or its log from some index on (a lost suffix, or a damaged range in the
middle of which only the intact prefix is kept). With `identity` on, a node whose
storage lost anything restarts under a new incarnation, as the real storage layer
does (raftlog/storage/identity.py), and must be re-admitted before it votes.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from raftlog.core import (
    AppendEntries,
    Membership,
    MemoryStorage,
    Message,
    ProposalDroppedError,
    RaftConfig,
    RawNode,
    RawNotLeaderError,
    Ready,
    Role,
)
from raftlog.entry import EntryType, HardState, LogEntry
from raftlog.sim.invariants import Checker

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


def _digest(prev: bytes, e: LogEntry) -> bytes:
    h = hashlib.blake2b(prev, digest_size=8)
    h.update(f"{e.index}:{e.term}:{int(e.type)}:".encode())
    h.update(e.data)
    return h.digest()


@dataclass
class SimNode:
    id: int
    cfg: RaftConfig
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    node: RawNode | None = None
    pending: Ready | None = None
    gen: int = 0
    """Incremented on crash so stale persist events are ignored."""
    applied: int = 0
    digest: bytes = b""
    applied_data: list[bytes] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.node is not None


class SimCluster:
    def __init__(self, seed: int, params: SimParams, trace_len: int = 80) -> None:
        self.seed = seed
        self.p = params
        self.rng = random.Random(seed)
        self.now = 0
        self._seq = 0
        self._events: list[tuple[int, int, str, Any]] = []
        self.check = Checker()
        self.trace: deque[str] = deque(maxlen=trace_len)
        self.verbose = False
        self.nodes: dict[int, SimNode] = {}
        self.groups: list[set[int]] | None = None  # partition, None = healed
        self.proposed = 0
        self.reads = 0
        self.losses = 0
        # incarnations come from their own stream so the fault schedule of a seed
        # does not depend on them
        self._inc_rng = random.Random(f"incarnations-{seed}")
        ids = range(1, params.voters + params.spares + 1)
        voters = tuple(range(1, params.voters + 1))
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
                incarnation=self._new_incarnation() if params.identity else 0,
            )
            sn = SimNode(i, cfg)
            self.nodes[i] = sn
            self._start(sn)

    # ------------------------------------------------------------ utilities
    def log(self, s: str) -> None:
        line = f"t={self.now} {s}"
        self.trace.append(line)
        if self.verbose:
            print(line)

    def schedule(self, at: int, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, payload))

    def live(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.node is not None]

    def leader(self) -> SimNode | None:
        best = None
        for n in self.live():
            if n.node.role is Role.LEADER and (best is None or n.node.term > best.node.term):  # type: ignore[union-attr]
                best = n
        return best

    # ------------------------------------------------------------ lifecycle
    def _start(self, sn: SimNode) -> None:
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
        # first tick at a random phase so nodes' clocks are not aligned
        self.schedule(self.now + self.rng.randrange(1, TICK + 1), "tick", (sn.id, sn.gen))

    def crash(self, nid: int) -> None:
        sn = self.nodes[nid]
        if sn.node is None:
            return
        self.log(f"CRASH {nid} (losing unsynced ready: {sn.pending is not None})")
        sn.node = None
        sn.pending = None
        sn.gen += 1
        self.check.on_crash(nid)

    def restart(self, nid: int) -> None:
        sn = self.nodes[nid]
        if sn.node is not None:
            return
        self._start(sn)
        self.log(f"RESTART {nid}: {sn.node}")
        self.check.on_restart(nid, sn.node)  # type: ignore[arg-type]
        self.check.on_digest(nid, sn.applied, sn.digest) if sn.applied else None

    def _new_incarnation(self) -> int:
        return self._inc_rng.randrange(1, 2**63)

    LOSS_KINDS = ("all", "hard_state", "suffix", "middle", "middle_and_vote")
    """What a node's storage loses. suffix/middle: the real storage's repair
    (raftlog/storage/repair.py) keeps the intact prefix before a lost tail or a
    damaged range, with the snapshot and the vote record; middle_and_vote: the same
    with the index (hence the vote record and the commit checkpoint) lost too."""

    def lose_storage(self, nid: int, kind: str) -> bool:
        """Crash `nid` and damage its storage (`kind` in LOSS_KINDS); it stays down
        until restarted. Returns False (and does nothing) when no entry's survival
        could be guaranteed: see `_loss_allowed`."""
        sn = self.nodes[nid]
        if not self._loss_allowed(nid):
            return False
        self.crash(nid)
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
        if self.p.identity:
            sn.cfg = replace(sn.cfg, incarnation=self._new_incarnation())
        self.losses += 1
        self.check.on_storage_loss(nid)
        self.log(f"LOSE {kind} of {nid} (new incarnation {sn.cfg.incarnation})")
        return True

    def _loss_allowed(self, nid: int) -> bool:
        """A loss must leave the cluster able to vouch for its data: at most one
        voter at a time is a replacement. So: a live leader exists whose newest
        configuration is committed and records, for every other voter, the
        incarnation that voter now has (no replacement still catching up)."""
        if not self.p.identity:
            return True
        ld = self.leader()
        if ld is None or ld.node is None:
            return False
        node = ld.node
        m = node.membership
        if node.pending_conf_index > node.log.committed:
            return False
        if nid in m.voters and len(m.voters) - 1 < len(m.voters) // 2 + 1:
            return False  # 1 or 2 voters: the others cannot outvote the loss
        for v in m.voters:
            if v == nid:
                continue
            if m.incarnation_of(v) != self.nodes[v].cfg.incarnation:
                return False
        return True

    # ------------------------------------------------------------- network
    def connected(self, a: int, b: int) -> bool:
        if self.groups is None:
            return True
        return any(a in g and b in g for g in self.groups)

    def send(self, m: Message) -> None:
        if isinstance(m, AppendEntries) and m.entries:
            self.check.check_entries(f"append {m.src}->{m.dst}", m.entries, m.prev_term)
        p = self.p
        if not self.connected(m.src, m.dst) or self.rng.random() < p.drop:
            return
        copies = 2 if self.rng.random() < p.dup else 1
        for _ in range(copies):
            delay = self.rng.randint(1, p.max_delay)
            if self.rng.random() < p.spike:
                delay += self.rng.randint(1, 20 * TICK)
            self.schedule(self.now + delay, "msg", m)

    # -------------------------------------------------------------- readies
    def _pump(self, sn: SimNode) -> None:
        """Take the next Ready if none is being persisted."""
        node = sn.node
        if node is None or sn.pending is not None or not node.has_ready():
            return
        rd = node.ready()
        sn.pending = rd
        for m in rd.early_messages:
            self.send(m)
        self.schedule(self.now + self.rng.randint(0, self.p.fsync_max), "persist", (sn.id, sn.gen))

    def _persist(self, sn: SimNode) -> None:
        rd, node = sn.pending, sn.node
        assert rd is not None and node is not None
        st = sn.storage
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
        st.append(rd.entries)
        if rd.entries:
            prev = st.term_at(rd.entries[0].index - 1)
            self.check.check_entries(f"storage of {sn.id}", rd.entries, prev)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        for m in rd.messages:
            self.send(m)
        if rd.snapshot is not None:
            idx, dig = rd.snapshot.data.split(b":", 1)
            sn.applied, sn.digest = int(idx), bytes.fromhex(dig.decode())
            self.check.on_digest(sn.id, sn.applied, sn.digest)
        for e in rd.committed_entries:
            if e.index != sn.applied + 1:
                self.check.fail(f"node {sn.id} applies {e.index} after {sn.applied}")
            sn.digest = _digest(sn.digest, e)
            sn.applied = e.index
            self.check.on_apply(sn.id, e, sn.digest)
        for r in rd.read_states:
            self.check.on_read_state(sn.id, r.index, r.context)
        sn.pending = None
        node.advance(rd)

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
            nid = m.dst
            sn = self.nodes[nid]
            if sn.node is None:
                return
            if self.verbose:
                self.log(f"{m.src}->{m.dst} {type(m).__name__} {_fmt(m)}")
            else:
                self.trace.append(f"t={self.now} {m.src}->{m.dst} {type(m).__name__} {_fmt(m)}")
            sn.node.step(m)
        elif kind == "tick":
            nid, gen = payload
            sn = self.nodes[nid]
            if sn.gen != gen or sn.node is None:
                return
            before = sn.node.role
            sn.node.tick()
            if sn.node.role is not before:
                self.log(f"{nid} {before.value} -> {sn.node}")
            self.schedule(self.now + TICK, "tick", (nid, gen))
        elif kind == "persist":
            nid, gen = payload
            sn = self.nodes[nid]
            if sn.gen != gen or sn.node is None or sn.pending is None:
                return
            self._persist(sn)
        elif kind == "call":
            payload()
            return
        else:  # pragma: no cover
            raise ValueError(kind)
        sn = self.nodes[nid]
        if sn.node is not None:
            self._pump(sn)
            self.check.check_node(sn.id, sn.node)

    def after_local_call(self, sn: SimNode) -> None:
        if sn.node is not None:
            self._pump(sn)
            self.check.check_node(sn.id, sn.node)

    # -------------------------------------------------------- client actions
    def propose(self, data: bytes | None = None) -> bool:
        ld = self.leader()
        if ld is None:
            return False
        self.proposed += 1
        data = data if data is not None else f"v{self.proposed}".encode()
        try:
            idx = ld.node.propose(data)  # type: ignore[union-attr]
        except (RawNotLeaderError, ProposalDroppedError):
            return False
        self.log(f"PROPOSE {data!r} at {ld.id} -> {idx}")
        self.after_local_call(ld)
        return True

    def read(self) -> None:
        live = self.live()
        if not live:
            return
        sn = self.rng.choice(live)
        self.reads += 1
        ctx = f"r{self.reads}".encode()
        try:
            sn.node.read_index(ctx)  # type: ignore[union-attr]
        except RawNotLeaderError:
            return
        self.check.on_read_request(ctx)
        self.after_local_call(sn)

    def transfer(self) -> None:
        ld = self.leader()
        if ld is None:
            return
        voters = sorted(ld.node.membership.voters - {ld.id})  # type: ignore[union-attr]
        if not voters:
            return
        target = self.rng.choice(voters)
        self.log(f"TRANSFER {ld.id} -> {target}")
        ld.node.transfer_leader(target)  # type: ignore[union-attr]
        self.after_local_call(ld)

    def compact(self) -> None:
        live = [n for n in self.live() if n.pending is None]
        if not live:
            return
        sn = self.rng.choice(live)
        node = sn.node
        assert node is not None
        idx = sn.applied
        if idx <= sn.storage.snapshot.meta.index or idx > node.log.stable_last():
            return
        snap = node.compact(idx, f"{idx}:{sn.digest.hex()}".encode())
        sn.storage.compact(snap)
        self.log(f"COMPACT {sn.id} at {idx}")

    def reconfigure(self) -> None:
        ld = self.leader()
        if ld is None:
            return
        node = ld.node
        assert node is not None
        m = node.membership
        outside = sorted(set(self.nodes) - m.members())
        choices: list[Membership] = []
        if outside:
            choices.append(m.add_learner(self.rng.choice(outside)))
        # like an operator reading `raftsink status`: promote only a learner the
        # membership knows by the storage it has now (a learner that lost its
        # storage unnoticed would make a configuration nobody can commit)
        promotable = sorted(
            i
            for i in m.learners
            if not self.p.identity or m.incarnation_of(i) == self.nodes[i].cfg.incarnation
        )
        if promotable:
            choices.append(m.add_voter(self.rng.choice(promotable)))
        if len(m.voters) > 3:
            choices.append(m.remove(self.rng.choice(sorted(m.voters))))
        if m.learners:
            choices.append(m.remove(self.rng.choice(sorted(m.learners))))
        if not choices:
            return
        new = self.rng.choice(choices)
        try:
            node.propose_membership(new)
        except (ProposalDroppedError, RawNotLeaderError):
            return
        self.log(f"RECONFIG at {ld.id}: {m} -> {new}")
        self.after_local_call(ld)

    # --------------------------------------------------------------- faults
    def partition(self) -> None:
        ids = list(self.nodes)
        self.rng.shuffle(ids)
        k = self.rng.randint(1, len(ids) - 1) if len(ids) > 1 else 1
        self.groups = [set(ids[:k]), set(ids[k:])]
        self.log(f"PARTITION {self.groups}")

    def isolate_leader(self) -> None:
        """Partition the leader with a random minority (possibly alone)."""
        ld = self.leader()
        if ld is None:
            self.partition()
            return
        others = [i for i in self.nodes if i != ld.id]
        self.rng.shuffle(others)
        k = self.rng.randint(0, max(0, (len(self.nodes) - 1) // 2 - 1))
        minority = {ld.id, *others[:k]}
        self.groups = [minority, set(self.nodes) - minority]
        self.log(f"PARTITION (leader) {self.groups}")

    def heal(self) -> None:
        if self.groups is not None:
            self.log("HEAL")
        self.groups = None

    def state(self) -> str:
        return "\n".join(
            f"  {sn.id}: {sn.node!r} applied={sn.applied} pending={sn.pending is not None}"
            if sn.node
            else f"  {sn.id}: down"
            for sn in self.nodes.values()
        )


def _fmt(m: Message) -> str:
    d = {f.name: getattr(m, f.name) for f in fields(m) if f.name not in ("src", "dst", "group_id")}
    if "entries" in d:
        es = d["entries"]
        d["entries"] = f"[{es[0].index}..{es[-1].index}]" if es else "[]"
    if "data" in d:
        d["data"] = len(d["data"])
    return " ".join(f"{k}={v}" for k, v in d.items())


__all__ = ["TICK", "EntryType", "SimCluster", "SimNode", "SimParams"]
