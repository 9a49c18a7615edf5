"""Coalesced heartbeats and node liveness of a SimCluster (a part of
raftlog.sim.cluster.SimCluster: every field is SimCluster's, set in its __init__;
this class holds no state of its own).

As raftlog/runtime/host.py does: a node's held heartbeats leave through the real
coalescer, one message per peer per flush; on arrival they are packed and
unpacked with the wire codec, expanded, and each row is stepped into its group's
replica (rows for a group not hosted are dropped and counted, I8). With
quiescence, a node sends node beats to the peers no Beats went to, runs its
NodeLiveness clock, and wakes the quiesced replicas liveness_wakes picks when a
peer goes down or comes back with a new nonce.
"""

from __future__ import annotations

from dataclasses import replace

from raftlog.core.liveness import liveness_wakes
from raftlog.sim.group import SimNode
from raftlog.sim.params import SimHost
from raftlog.transport.beats import (
    HOST_GROUP_ID,
    Beats,
    BeatsResponse,
    coalesce,
    expand,
    pack_rows,
    unpack_rows,
)


class SimBeats:
    """The coalesced-beats and node-liveness part of SimCluster (no state of its own)."""

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
