"""Quiescence and node liveness of a RaftHost (a part of
raftlog.runtime.host.RaftHost: every field is RaftHost's, set in its __init__;
this class holds no state of its own).

Which groups the tick loop ticks (a group reports entering or leaving
quiescence); the peers owed node beats and the node beats themselves; the
NodeLiveness clock that declares a silent or broken peer down, and the start
nonce that shows a peer restarted; and the quiesced groups woken for it
(liveness_wakes decides which). See host.py's docstring, "Quiescence".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from raftlog.core.liveness import NodeLiveness, liveness_wakes
from raftlog.transport.beats import HOST_GROUP_ID, Beats, BeatsResponse

if TYPE_CHECKING:
    from raftlog.runtime.group import RaftGroup

log = logging.getLogger("raftlog.runtime")

_PEER_REFRESH_TICKS = 32
"""How often the set of peers owed node beats is recomputed from the groups'
peers (membership changes add peers without telling the host)."""


class HostLiveness:
    """The quiescence and node-liveness part of RaftHost (no state of its own)."""

    # --------------------------------------------------- quiescence, liveness

    def peers_down(self) -> frozenset[int]:
        """The peers this host declares down now (node liveness: silent for the
        silence limit, liveness_silence_ms drawn in [S, 1.5 S], or their stream broken
        and still down), until a message of theirs arrives. Empty before the first
        group opens. A view of this process only: another node may differ for a
        while. Read on the host's loop."""
        lv = self._liveness
        return frozenset(lv.down) if lv is not None and lv.down else frozenset()

    def _on_quiesce_change(self, group: RaftGroup) -> None:
        """A group's core entered or left quiescence (RaftGroup._sync_quiesced)."""
        gid = group.group_id
        if self.groups.get(gid) is not group:
            return  # not (or no longer) hosted
        if group.quiesced:
            self._ticking.pop(gid, None)
            self._quiet[gid] = group
            if self._liveness is not None and self._liveness.down:
                for g, _ in liveness_wakes(
                    self.node_id, [(group, group.core)], self._liveness.down, set()
                ):
                    self._liveness_wake(g, campaign=False)
        else:
            self._quiet.pop(gid, None)
            self._ticking[gid] = group

    def _refresh_peers(self) -> None:
        """The peers owed node beats: every other member any hosted group knows
        (O(groups): on removal and every _PEER_REFRESH_TICKS ticks only)."""
        peers = {p for g in self.groups.values() for p in g.peers if p != self.node_id}
        self._beat_peers = peers
        if self.groups:
            self._election_ticks = min(g.options.election_ticks for g in self.groups.values())
        if self._liveness is not None:
            self._liveness.set_peers(peers)

    def _add_beat_peers(self, group: RaftGroup) -> None:
        """A group was added: its peers are owed node beats from now (O(its peers),
        so opening 1,000 groups stays linear)."""
        t = group.options.election_ticks
        self._election_ticks = min(self._election_ticks, t) if self._election_ticks else t
        new = {p for p in group.peers if p != self.node_id} - self._beat_peers
        self._beat_peers |= new
        if self._liveness is None:
            # S = liveness_silence_ms in ticks, never below T (the smallest election
            # timeout of the groups hosted when the first one is added)
            s = max(t, -(-self.options.liveness_silence_ms // self.options.tick_ms))
            self._liveness = NodeLiveness(self._rng, s, self.options.liveness_broken_ticks or t)
        self._liveness.add_peers(new)

    def _on_unreachable(self, peer: int) -> None:
        """The transport lost (or could not open) its stream to peer. Evidence
        only while the stream stays down: an overflow on a live stream is not."""
        if self._liveness is not None and not self._peer_connected(peer):  # type: ignore[misc]
            self._liveness.broken(peer)

    def _send_node_beats(self) -> None:
        owed = [p for p in self._beat_peers if p not in self._beaten]
        self._beaten = set()
        if not owed:
            return
        self.stats.node_beats_sent += len(owed)
        self.transport.send(
            [
                Beats(
                    src=self.node_id,
                    dst=p,
                    term=0,
                    group_id=HOST_GROUP_ID,
                    rows=[],
                    node_nonce=self.nonce,
                )
                for p in owed
            ]
        )

    def _node_beats(self) -> None:
        """Once per tick: on every node_beat_ticks-th beat tick, have the tick's flush
        send a node beat to every peer that got no Beats since the previous node
        beats; then check which peers fell silent."""
        now = self.stats.ticks
        if now % _PEER_REFRESH_TICKS == 0:
            self._refresh_peers()
        # Node beats go on beat ticks only (every node_beat_ticks-th), so with
        # beat_ticks > 1 they never add a message between two beat rounds.
        if now % self._node_beat_every == 0:
            self._node_beats_due = True
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)
        lv = self._liveness
        if lv is None:
            return
        broken = lv.seen_broken
        down = lv.tick(self._peer_connected)
        if down:
            self.stats.peers_declared_down += len(down)
            self.stats.peers_seen_broken += lv.seen_broken - broken
            log.info("raft.node_silent node=%d peers=%s", self.node_id, down)
            self._wake_for(set(down), set())

    def _heard_from(self, m: Beats | BeatsResponse) -> None:
        if self._liveness is not None and self._liveness.heard(m.src, m.node_nonce):
            # A new process: every lease its replicas held is gone.
            self.stats.peer_restarts_seen += 1
            log.info("raft.node_restarted node=%d peer=%d", self.node_id, m.src)
            self._wake_for({m.src}, {m.src})

    def _wake_for(self, gone: set[int], restarted: set[int]) -> None:
        """Peers' processes are gone (down or restarted): wake what
        liveness_wakes says (followers of theirs campaign; leaders here without a
        live quorum, or with a restarted member, resume heartbeats)."""
        assert self._liveness is not None
        quiet = [(g, g.core) for g in self._quiet.values()]
        for g, campaign in liveness_wakes(
            self.node_id, quiet, self._liveness.down, gone, restarted
        ):
            self._liveness_wake(g, campaign)

    def _liveness_wake(self, group: RaftGroup, campaign: bool) -> None:
        self.stats.liveness_wakes += 1
        group._wake_quiesced(campaign=campaign)
