"""The simulated network of a SimCluster (a part of raftlog.sim.cluster.SimCluster:
every field is SimCluster's, set in its __init__; this class holds no state of its own).

One network message at a time: partitions, drop, duplication and random delay
(hence reordering) apply to it whole; heartbeats are held for the node's flush
(cluster_beats.py) when they travel coalesced; the misroute fault (I8) sends a
message, or a coalesced beat's extra row, to a node that does not host its group.
The partition faults (a random cut, the leader with a minority, heal) live here
too.
"""

from __future__ import annotations

from dataclasses import replace

from raftlog.core import AppendEntries, Message
from raftlog.sim.group import SimNode
from raftlog.sim.params import TICK
from raftlog.transport.beats import COALESCED_KINDS, Beats, coalescible


class SimNetwork:
    """The network part of SimCluster (no state of its own)."""

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

    def _replica(self, nid: int, gid: int) -> SimNode | None:
        """Node nid's live replica of group gid, None if nid does not host gid (I8)."""
        return self.hosts[nid].replicas.get(gid)

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
