"""Quiescence in the core: an idle leader stops heartbeating, its followers stop their
election timers (docs/raft-runtime.md, "Quiescence"; CockroachDB's quiescence).
"""

from __future__ import annotations

from raftlog.core.messages import Message, MsgType
from raftlog.core.progress import ProgressState
from raftlog.core.ready import Role


class Quiescence:
    """The quiescence part of `RawNode` (a part of it: every field is RawNode's, set in its
    `__init__`; this class holds no state of its own)."""

    def _quiescible(self) -> bool:
        """The leader may stop heartbeating: nothing is in flight and every
        follower holds, and acknowledged, the whole log, which is committed and
        durable here; every follower answered within this CheckQuorum window
        or the previous one (a leader cut off from a follower never quiesces,
        one whose answers take ticks to arrive still does); no read, transfer,
        configuration or identity change is pending (CockroachDB's
        shouldReplicaQuiesce)."""
        log = self.log
        last = log.last_index()
        if (
            self._reads
            or self._reads_waiting
            or self.lead_transferee
            or log.committed != last
            or log.stable_last() != last
            or log.term_at(last) != self.term
            or self.pending_conf_index > log.committed
            or log.unstable.snapshot is not None
        ):
            return False
        answered = self._answered_last_window
        for pid, pr in self.progress.items():
            if pid != self.id and (
                pr.match != last
                or not (pr.recent_active or pid in answered)
                or pr.state is not ProgressState.REPLICATE
            ):
                return False
        if self.cfg.incarnation:
            change = self.identity_change()  # what _maybe_admit would propose
            return change is None or change == self.membership
        return True

    def _wakes(self, m: Message) -> bool:
        """Whether a current or newer message ends this node's quiescence. Every one
        does except the leader's quiesce beat repeated and, at a leader, a
        follower's answer to a beat sent before the quiesce beat. With beats and
        their answers held to a host's beat tick (RaftHost), that answer often
        arrives after the leader quiesced; it says nothing the leader does not
        know (every follower had acknowledged the whole log), and waking on it
        kept idle groups cycling between quiesced and awake. A follower that does
        not agree to quiesce answers the quiesce beat itself, flagged
        (HeartbeatResponse.quiesce), and that answer wakes."""
        if m.term != self.term:
            return True
        if m.type is MsgType.HEARTBEAT:
            return not (m.quiesce and m.src == self.lead)  # type: ignore[attr-defined]
        if m.type is MsgType.HEARTBEAT_RESP:
            return m.quiesce  # type: ignore[attr-defined]
        return True

    def _quiesce(self) -> None:
        """Send the quiesce beat (commit = last = every follower's match) and stop."""
        self._bcast_heartbeat(quiesce=True)
        self.quiesced = True
        self.heartbeat_elapsed = 0

    def _unquiesce(self) -> None:
        if not self.quiesced:
            return
        self.quiesced = False
        self._idle_ticks = 0
        self.heartbeat_elapsed = 0
        if self.role is Role.LEADER:
            # CheckQuorum judges the next election timeout on fresh answers only:
            # the marks from before the quiet period say nothing about now.
            self.election_elapsed = 0
            self._answered_last_window = set()
            for pid, pr in self.progress.items():
                if pid != self.id:
                    pr.recent_active = False

    def wake(self, campaign: bool = False) -> None:
        """Leave quiescence (the runtime's call: a proposal is coming, or node
        liveness says so). campaign (followers): the leader's process went
        silent or restarted, so forget its lease (votes are no longer ignored)
        and campaign after a random 1..T more ticks (randomized_timeout - T),
        which spreads the elections of many groups. A leader always resumes
        heartbeats and CheckQuorum, which deposes it within T ticks if a
        quorum no longer answers."""
        self._unquiesce()
        if campaign and self.role is not Role.LEADER:
            self.election_elapsed = max(self.election_elapsed, self.cfg.election_tick)
