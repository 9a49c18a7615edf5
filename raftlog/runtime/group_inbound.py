"""What a RaftHost calls into a RaftGroup (a part of raftlog.runtime.group.RaftGroup:
every field is RaftGroup's, set in its __init__ or, for what needs the storage, its
_open; this class holds no state of its own).

Received messages (the transport's and the host's expanded coalesced beats), the
host's ticks and housekeeping, and quiescence: the group reports entering or
leaving it to the host and is woken by the host's node liveness. Light Readies
(no disk write, no role change) made by these calls are handled inline, in the
caller, when nothing is ahead of them in the Ready pipeline (group.py).
"""

from __future__ import annotations

from raftlog.core import Role
from raftlog.runtime.errors import LeaderChangedError, ProposalTimeoutError


class GroupInbound:
    """The host-facing part of RaftGroup: messages, ticks, quiescence, housekeeping
    (no state of its own)."""

    # ----------------------------------------------------------- inbound

    def _on_messages(self, msgs: list) -> None:
        if self._stopped:
            return
        for m in msgs:
            self.core.step(m)
        self._sync_quiesced()
        if not self._ready_inline():
            self._wake.set()

    def _ready_inline(self) -> bool:
        """Handle the core's Readies here, in the caller (a received batch, a tick),
        while each is light (RawNode.ready_is_light: no disk write, no role change)
        and nothing is ahead of it: no Ready in the raft loop's hands or in the
        persist pipeline, no parked commits, no queued proposals. False: the raft
        loop must take the rest (it is woken).

        Why: a heartbeat and its answer took four task switches (the raft loop, the
        persist loop, the raft loop again, the apply loop) per group; with many
        groups per host those were most of the CPU of a tick. Order is kept: with
        nothing ahead, the persist loop would have sent this Ready's messages and
        released its commits at once (no write to wait for), exactly as here."""
        if self._pipeline or self._in_ready or self._proposals or self._parked_commits:
            return False
        if self._fatal is not None:
            return True
        core_ = self.core
        try:
            while core_.has_ready():
                if not core_.ready_is_light():
                    return False
                rd = core_.ready()
                self.stats.readies += 1
                self.stats.inline_readies += 1
                if rd.early_messages:
                    self.host.send(rd.early_messages)
                if rd.hard_state is not None:
                    self._last_hs = rd.hard_state  # commit only: saved by housekeeping
                if rd.committed_entries:
                    self._release_committed(rd.committed_entries)
                if rd.messages:
                    self.host.send(rd.messages)
                if rd.hard_state is not None:
                    core_.on_hard_state_persisted(rd.hard_state)
                for rs in rd.read_states:
                    w = self._reads.pop(rs.context, None)
                    if w is not None and not w.future.done():
                        w.future.set_result(rs.index)
        except Exception as exc:  # a bug: stop loudly, as the raft loop would
            self._fail(exc)
        return True

    # ---------------------------------------------------------- quiescence

    def _sync_quiesced(self) -> None:
        """Tell the host when the core entered or left quiescence (the host
        ticks only groups that are not quiesced). Called after every core call
        that can change it: step, tick, propose, read, transfer, membership."""
        q = self.core.quiesced
        if q is not self.quiesced:
            self.quiesced = q
            self.host._on_quiesce_change(self)

    def _wake_quiesced(self, campaign: bool) -> None:
        """The host's node liveness: leave quiescence (and, campaign, forget the
        silent leader's lease; see RawNode.wake)."""
        if self._stopped or self._fatal is not None:
            return
        self.core.wake(campaign)
        self.stats.quiesce_wakes += 1
        self._sync_quiesced()
        if self.core.has_ready():
            self._wake.set()

    # ------------------------------------------------- the host's loops

    def _tick(self) -> None:
        """One tick of the core (the host's tick loop calls it for every group
        that is not quiesced)."""
        c = self.core
        c.tick()
        self._sync_quiesced()
        if c.has_ready() and not self._ready_inline():
            self._wake.set()

    def _housekeep(self, now: float) -> None:
        """Proposal/read timeouts and the commit checkpoint (the host's
        housekeeping loop calls it for every group, every period)."""
        for table in (self._waiters, self._reads):
            if not table:
                continue
            expired = [k for k, w in table.items() if w.deadline <= now]
            if table is self._waiters:
                self._pending_count -= len(expired)
            for k in expired:
                w = table.pop(k)
                if not w.future.done():
                    w.future.set_exception(
                        ProposalTimeoutError("no commit within the timeout; outcome unknown")
                        if self.role is Role.LEADER
                        else LeaderChangedError("leadership lost; outcome unknown")
                    )
        if now - self._last_checkpoint >= self.options.commit_checkpoint_s:
            self._last_checkpoint = now
            hs = self._last_hs
            if hs.commit != self._saved_hs.commit and hs.term == self._saved_hs.term:
                self._saved_hs = hs
                # Only a restart optimisation: written in order with the
                # appends (so never ahead of them) but not fsynced.
                self._watch_write(self.queue.save_hard_state(hs, durable=False))
