"""Storage loss in a SimCluster (a part of raftlog.sim.cluster.SimCluster: every
field is SimCluster's, set in its __init__; this class holds no state of its own).

A node loses its whole storage, its hard state (vote record), or its log from
some index on (a lost suffix, or a damaged range of which only the intact prefix
is kept), for every group on it; with identity on it then restarts under a new
incarnation (raftlog/storage/identity.py), drawn from the cluster's own
incarnation stream.
"""

from __future__ import annotations

from dataclasses import replace

from raftlog.core import MemoryStorage
from raftlog.entry import HardState
from raftlog.sim.group import SimNode


class SimStorageLoss:
    """The storage-loss part of SimCluster (no state of its own)."""

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
