"""A synchronous, fully deterministic test network of `RawNode`s.

Every node's Ready is processed immediately and completely (persist, send,
apply, advance), so scenario tests can be written step by step like the Raft
paper's figures: elect, cut links, propose, heal, and inspect logs. For random
faults, lost writes and invariant checking use `raftlog.sim.cluster`.
"""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from raftlog.core import (
    MemoryStorage,
    Message,
    MsgType,
    RaftConfig,
    RawNode,
    ReadState,
    Role,
)
from raftlog.entry import EntryType, LogEntry

MessageFilter = Callable[[Message], bool]
"""Return False to drop a message."""


@dataclass
class Peer:
    """A node with its storage and a trivial state machine (list of DATA payloads)."""

    id: int
    cfg: RaftConfig
    storage: MemoryStorage
    node: RawNode
    applied: list[bytes] = field(default_factory=list)
    applied_index: int = 0
    read_states: list[ReadState] = field(default_factory=list)
    snapshots_installed: int = 0
    alive: bool = True

    def process_ready(self) -> list[Message]:
        """Persist, apply and advance one Ready; return the messages to send."""
        rd = self.node.ready()
        st = self.storage
        if rd.snapshot is not None:
            st.apply_snapshot(rd.snapshot)
            self.applied = [bytes.fromhex(x) for x in json.loads(rd.snapshot.data or b"[]")]
            self.applied_index = rd.snapshot.meta.index
            self.snapshots_installed += 1
        st.append(rd.entries)
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        for e in rd.committed_entries:
            assert e.index == self.applied_index + 1, (e.index, self.applied_index)
            self.applied_index = e.index
            if e.type is EntryType.DATA:
                self.applied.append(e.data)
        self.read_states.extend(rd.read_states)
        self.node.advance(rd)
        return rd.early_messages + rd.messages

    def snapshot_data(self) -> bytes:
        return json.dumps([d.hex() for d in self.applied]).encode()

    def log(self) -> list[LogEntry]:
        """Stable log after the snapshot (tests call this when everything is persisted)."""
        return self.storage.all_entries()


class Cluster:
    """N peers over a perfect, synchronous network with switchable link cuts."""

    def __init__(
        self,
        voters: Iterable[int] = (1, 2, 3),
        learners: Iterable[int] = (),
        seed: int = 0,
        incarnations: bool = False,
        sealed: dict[int, int] | None = None,
        **cfg: object,
    ) -> None:
        self.voters = tuple(voters)
        self.learners = tuple(learners)
        self.rng = random.Random(seed)
        self.base_cfg = cfg
        # with incarnations, node i's storage starts as incarnation 1000 + i; a wipe
        # gives it a new one (wipe())
        self.incarnations = incarnations
        # a sealed start (RaftConfig.incarnations) for the initial peers
        self.sealed = dict(sealed or {})
        self.peers: dict[int, Peer] = {}
        self.cut_links: set[tuple[int, int]] = set()
        self.filters: list[MessageFilter] = []
        self.delivered: list[Message] = []
        for i in (*self.voters, *self.learners):
            self.add_peer(i, peers=self.voters, learners=self.learners)

    def add_peer(self, i: int, peers: Iterable[int] = (), learners: Iterable[int] = ()) -> Peer:
        cfg = RaftConfig(id=i, peers=tuple(peers), learners=tuple(learners), **self.base_cfg)  # type: ignore[arg-type]
        if self.incarnations:
            cfg = replace(cfg, incarnation=1000 + i)
        members = set(cfg.peers) | set(cfg.learners)
        if self.sealed and members:
            cfg = replace(cfg, incarnations={n: v for n, v in self.sealed.items() if n in members})
        st = MemoryStorage()
        p = Peer(i, cfg, st, RawNode(cfg, st, random.Random(self.rng.random())))
        self.peers[i] = p
        return p

    def node(self, i: int) -> RawNode:
        return self.peers[i].node

    # network ---------------------------------------------------------------
    def cut(self, a: int, b: int) -> None:
        self.cut_links |= {(a, b), (b, a)}

    def isolate(self, i: int) -> None:
        for j in self.peers:
            if j != i:
                self.cut(i, j)

    def partition(self, *groups: Iterable[int]) -> None:
        gs = [set(g) for g in groups]
        for a in self.peers:
            for b in self.peers:
                if a != b and not any(a in g and b in g for g in gs):
                    self.cut_links.add((a, b))

    def heal(self) -> None:
        self.cut_links.clear()
        self.filters.clear()

    def drop(
        self, src: int | None = None, dst: int | None = None, type: MsgType | None = None
    ) -> None:
        """Drop every matching message until heal()."""

        def f(m: Message) -> bool:
            return not (
                (src is None or m.src == src)
                and (dst is None or m.dst == dst)
                and (type is None or m.type is type)
            )

        self.filters.append(f)

    def _passes(self, m: Message) -> bool:
        if (m.src, m.dst) in self.cut_links:
            return False
        p = self.peers.get(m.dst)
        if p is None or not p.alive:
            return False
        return all(f(m) for f in self.filters)

    def deliver(self, msgs: Iterable[Message]) -> None:
        """Step each message into its destination (no Ready processing)."""
        for m in msgs:
            if self._passes(m):
                self.delivered.append(m)
                self.peers[m.dst].node.step(m)

    def collect(self) -> list[Message]:
        """Process every pending Ready once; return the produced messages."""
        out: list[Message] = []
        for p in self.peers.values():
            if p.alive and p.node.has_ready():
                out.extend(p.process_ready())
        return out

    def stabilize(self, max_rounds: int = 10_000) -> None:
        """Deliver messages until no node has anything left to do."""
        q: deque[Message] = deque()
        for _ in range(max_rounds):
            q.extend(self.collect())
            if not q:
                return
            while q:
                m = q.popleft()
                if self._passes(m):
                    self.delivered.append(m)
                    self.peers[m.dst].node.step(m)
                    p = self.peers[m.dst]
                    if p.node.has_ready():
                        q.extend(p.process_ready())
        raise RuntimeError("cluster did not stabilize")

    # time and requests -----------------------------------------------------
    def tick(self, i: int, n: int = 1) -> None:
        for _ in range(n):
            self.peers[i].node.tick()
            self.stabilize()

    def tick_all(self, n: int = 1) -> None:
        for _ in range(n):
            for p in self.peers.values():
                if p.alive:
                    p.node.tick()
            self.stabilize()

    def campaign(self, i: int) -> None:
        self.peers[i].node.campaign()
        self.stabilize()

    def elect(self, i: int) -> None:
        self.campaign(i)
        assert self.node(i).role is Role.LEADER, self.node(i)

    def propose(self, i: int, data: bytes) -> tuple[int, int]:
        r = self.node(i).propose(data)
        self.stabilize()
        return r

    def leader(self) -> int | None:
        ls = [i for i, p in self.peers.items() if p.alive and p.node.role is Role.LEADER]
        return max(ls, key=lambda i: self.node(i).term) if ls else None

    def crash(self, i: int) -> None:
        self.peers[i].alive = False

    def restart(self, i: int) -> None:
        """Restart from storage (everything was persisted synchronously)."""
        p = self.peers[i]
        st = p.storage
        p.applied = [bytes.fromhex(x) for x in json.loads(st.snapshot.data or b"[]")]
        p.applied_index = st.snapshot.meta.index
        cfg = replace(p.cfg, applied=p.applied_index)
        p.node = RawNode(cfg, st, random.Random(self.rng.random()), st.hard_state)
        p.alive = True

    def wipe(self, i: int) -> None:
        """Peer i loses its whole storage and restarts empty (a new incarnation when
        the cluster runs with incarnations; the same id and configuration)."""
        p = self.peers[i]
        p.storage = MemoryStorage()
        if p.cfg.incarnation:
            p.cfg = replace(p.cfg, incarnation=p.cfg.incarnation + 100)
        self.restart(i)

    def compact(self, i: int, index: int | None = None) -> None:
        """Snapshot peer i's state machine at its applied index and compact."""
        p = self.peers[i]
        idx = p.applied_index if index is None else index
        assert idx == p.applied_index, "harness snapshots only at the applied index"
        snap = p.node.compact(idx, p.snapshot_data())
        p.storage.compact(snap)
