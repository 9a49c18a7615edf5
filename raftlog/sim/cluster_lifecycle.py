"""Node starts, crashes and restarts of a SimCluster (a part of
raftlog.sim.cluster.SimCluster: every field is SimCluster's, set in its __init__;
this class holds no state of its own).

A start rebuilds every replica on the node from what its storage persisted (and,
with quiescence, a new process nonce and liveness state); a crash stops every
replica on the node and loses the disk round in flight and the beats not yet
flushed; a restart starts it again and tells each group's checker.
"""

from __future__ import annotations

import random
from dataclasses import replace

from raftlog.core import RawNode
from raftlog.core.liveness import NodeLiveness
from raftlog.sim.params import TICK, SimHost


class SimLifecycle:
    """The start/crash/restart part of SimCluster (no state of its own)."""

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
