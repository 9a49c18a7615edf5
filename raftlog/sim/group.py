"""One simulated Raft group: its replicas (one per hosting node), its invariant
checker and the client actions that target it.

The world around it (time, the event queue, the network, node crashes) is the
`SimCluster` (cluster.py); a group only ever touches the replicas it hosts, so a
fault on a node reaches a group through the cluster, never group to group.

Invariants kept here:
- A group's replicas are exactly the nodes of its placement (`nodes`); a node
  outside it never gets a replica, so a message for this group sent there is an
  I8 drop (counted by the cluster), never a delivery.
- With `tag` non-empty (more than one group), every DATA payload proposed in this
  group starts with `tag`, so the checker can tell (I1) an entry of another
  group that leaked into this log.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raftlog.core import (
    Membership,
    MemoryStorage,
    ProposalDroppedError,
    RaftConfig,
    RawNode,
    RawNotLeaderError,
    Ready,
    Role,
)
from raftlog.entry import LogEntry
from raftlog.sim.invariants import Checker

if TYPE_CHECKING:
    from raftlog.sim.cluster import SimCluster


def _digest(prev: bytes, e: LogEntry) -> bytes:
    h = hashlib.blake2b(prev, digest_size=8)
    h.update(f"{e.index}:{e.term}:{int(e.type)}:".encode())
    h.update(e.data)
    return h.digest()


@dataclass
class SimNode:
    """One replica: node `id`'s copy of group `gid` (with one group, simply the node)."""

    id: int
    cfg: RaftConfig
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    node: RawNode | None = None
    pending: Ready | None = None
    applied: int = 0
    digest: bytes = b""
    applied_data: list[bytes] = field(default_factory=list)
    gid: int = 0

    @property
    def alive(self) -> bool:
        return self.node is not None


class SimGroup:
    """Group `gid`: replicas on the nodes of its placement, a Checker of its own."""

    def __init__(self, c: SimCluster, gid: int, tag: bytes = b"") -> None:
        self.c = c
        self.gid = gid
        self.tag = tag
        self.nodes: dict[int, SimNode] = {}
        self.check = Checker(group=gid if tag else None, tag=tag)
        self.proposed = 0
        self.reads = 0

    def live(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.node is not None]

    def leader(self) -> SimNode | None:
        best = None
        for n in self.live():
            if n.node.role is Role.LEADER and (best is None or n.node.term > best.node.term):  # type: ignore[union-attr]
                best = n
        return best

    # ---------------------------------------------------------------- storage
    def persist(self, sn: SimNode) -> None:
        """The replica's pending Ready reached the disk: store, send, apply, advance."""
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
            self.c.send(m)
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

    def loss_allowed(self, nid: int) -> bool:
        """A loss must leave the group able to vouch for its data: at most one
        voter at a time is a replacement. So: a live leader exists whose newest
        configuration is committed and records, for every other voter, the
        incarnation that voter now has (no replacement still catching up)."""
        if not self.c.p.identity:
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

    # --------------------------------------------------------- client actions
    def propose(self, data: bytes | None = None) -> bool:
        c = self.c
        ld = self.leader()
        if ld is None:
            return False
        self.proposed += 1
        data = data if data is not None else self.tag + f"v{self.proposed}".encode()
        try:
            idx = ld.node.propose(data)  # type: ignore[union-attr]
        except (RawNotLeaderError, ProposalDroppedError):
            return False
        c.log(f"PROPOSE {data!r} at {ld.id} -> {idx}")
        c.after_local_call(ld)
        return True

    def read(self) -> None:
        c = self.c
        live = self.live()
        if not live:
            return
        sn = c.rng.choice(live)
        self.reads += 1
        ctx = f"r{self.reads}".encode()
        try:
            sn.node.read_index(ctx)  # type: ignore[union-attr]
        except RawNotLeaderError:
            return
        self.check.on_read_request(ctx)
        c.after_local_call(sn)

    def transfer(self) -> None:
        c = self.c
        ld = self.leader()
        if ld is None:
            return
        voters = sorted(ld.node.membership.voters - {ld.id})  # type: ignore[union-attr]
        if not voters:
            return
        target = c.rng.choice(voters)
        c.log(f"TRANSFER {self._g()}{ld.id} -> {target}")
        ld.node.transfer_leader(target)  # type: ignore[union-attr]
        c.after_local_call(ld)

    def compact(self) -> None:
        c = self.c
        live = [n for n in self.live() if n.pending is None]
        if not live:
            return
        sn = c.rng.choice(live)
        node = sn.node
        assert node is not None
        idx = sn.applied
        if idx <= sn.storage.snapshot.meta.index or idx > node.log.stable_last():
            return
        snap = node.compact(idx, f"{idx}:{sn.digest.hex()}".encode())
        sn.storage.compact(snap)
        c.log(f"COMPACT {self._g()}{sn.id} at {idx}")

    def reconfigure(self) -> None:
        c = self.c
        ld = self.leader()
        if ld is None:
            return
        node = ld.node
        assert node is not None
        m = node.membership
        outside = sorted(set(self.nodes) - m.members())
        choices: list[Membership] = []
        if outside:
            choices.append(m.add_learner(c.rng.choice(outside)))
        # like an operator reading `raftsink status`: promote only a learner the
        # membership knows by the storage it has now (a learner that lost its
        # storage unnoticed would make a configuration nobody can commit)
        promotable = sorted(
            i
            for i in m.learners
            if not c.p.identity or m.incarnation_of(i) == self.nodes[i].cfg.incarnation
        )
        if promotable:
            choices.append(m.add_voter(c.rng.choice(promotable)))
        if len(m.voters) > 3:
            choices.append(m.remove(c.rng.choice(sorted(m.voters))))
        if m.learners:
            choices.append(m.remove(c.rng.choice(sorted(m.learners))))
        if not choices:
            return
        new = c.rng.choice(choices)
        try:
            node.propose_membership(new)
        except (ProposalDroppedError, RawNotLeaderError):
            return
        c.log(f"RECONFIG {self._g()}at {ld.id}: {m} -> {new}")
        c.after_local_call(ld)

    def _g(self) -> str:
        """Trace prefix naming the group (empty with one group: traces unchanged)."""
        return f"g{self.gid} " if self.tag else ""

    def state(self) -> str:
        return "\n".join(
            f"  {self._g()}{sn.id}: {sn.node!r} applied={sn.applied} pending={sn.pending is not None}"
            if sn.node
            else f"  {self._g()}{sn.id}: down"
            for sn in self.nodes.values()
        )
