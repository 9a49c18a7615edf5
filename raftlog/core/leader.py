"""A leader's side of replication: CheckQuorum, answers from followers, the commit
rule, appends and snapshots sent under flow control, leadership transfer.

Leader append-only: a leader never truncates its own log. Leader completeness: it
commits by counting replicas only for entries of its current term, and only the
acknowledgements of the storage the membership records count.
"""

from __future__ import annotations

from raftlog.core.config import RawNotLeaderError
from raftlog.core.log_reader import entry_size
from raftlog.core.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    MsgType,
    ReadIndex,
    TimeoutNow,
)
from raftlog.core.progress import Progress, ProgressState
from raftlog.core.quorum import committed_index, has_quorum
from raftlog.core.ready import Role


class LeaderSide:
    """The leader part of `RawNode` (a part of it: every field is RawNode's, set in its
    `__init__`; this class holds no state of its own)."""

    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.cfg.election_tick:
            self.election_elapsed = 0
            if self.cfg.check_quorum and not self._quorum_active():
                self._become_follower(self.term, 0)
                return
            self.lead_transferee = 0
        if self.cfg.quiesce_ticks:
            if self._quiescible():
                self._idle_ticks += 1
                if self._idle_ticks >= self.cfg.quiesce_ticks:
                    self._quiesce()
                    return
            else:
                self._idle_ticks = 0
        if self.heartbeat_elapsed >= self.cfg.heartbeat_tick:
            self.heartbeat_elapsed = 0
            self._bcast_heartbeat()
            if self.cfg.incarnation:
                self._maybe_admit()

    def _quorum_active(self) -> bool:
        """CheckQuorum: heard from a majority of voters during the last election
        timeout. Resets the activity marks for the next round."""
        active = {self.id}
        answered = set()
        for pid, pr in self.progress.items():
            if pr.recent_active:
                answered.add(pid)
                if self.counts(pid, pr.incarnation):
                    active.add(pid)
            if pid != self.id:
                pr.recent_active = False
        self._answered_last_window = answered
        return has_quorum(self.membership.voters, active)

    def _step_leader(self, m: Message) -> None:
        t = m.type
        if t is MsgType.READ_INDEX:
            assert isinstance(m, ReadIndex)
            self._leader_read(m.src, m.context)
            return
        pr = self.progress.get(m.src)
        if pr is None:
            return
        if t is MsgType.APPEND_RESP:
            pr.recent_active = pr.answered = True
            self._handle_append_resp(m, pr)  # type: ignore[arg-type]
        elif t is MsgType.HEARTBEAT_RESP:
            pr.recent_active = pr.answered = True
            self._handle_heartbeat_resp(m, pr)  # type: ignore[arg-type]
        elif t is MsgType.SNAPSHOT_RESP:
            pr.recent_active = pr.answered = True
            assert isinstance(m, InstallSnapshotResponse)
            if pr.state is ProgressState.SNAPSHOT and m.index == pr.pending_snapshot:
                pr.snap_offset = m.next_offset
                self._send_snapshot_chunk(m.src, pr)

    def _handle_append_resp(self, m: AppendEntriesResponse, pr: Progress) -> None:
        if m.reject:
            probe = m.reject_hint
            if m.log_term > 0:
                probe, _ = self.log.find_conflict_by_term(m.reject_hint, m.log_term)
            if pr.maybe_decr_to(m.index, probe):
                if pr.state is ProgressState.REPLICATE:
                    pr.become_probe()
                self._send_append(m.src)
            return
        if pr.state is ProgressState.REPLICATE:
            pr.inflights.free_le(m.index)
        if pr.maybe_update(m.index):
            if pr.state is ProgressState.PROBE:
                pr.become_replicate()
            elif pr.state is ProgressState.SNAPSHOT and pr.match >= pr.pending_snapshot:
                pr.become_probe()
            if self._maybe_commit():
                self._bcast_append()
            if self.role is not Role.LEADER:
                return
            if m.src == self.lead_transferee and pr.match == self.log.last_index():
                self._send(TimeoutNow(src=self.id, dst=m.src, term=self.term))
        self._send_append(m.src, send_if_empty=False)

    def _handle_heartbeat_resp(self, m: HeartbeatResponse, pr: Progress) -> None:
        pr.probe_sent = False
        if pr.state is ProgressState.REPLICATE and pr.inflights.full():
            pr.inflights.free_first()
        if pr.state is ProgressState.SNAPSHOT:
            self._send_snapshot_chunk(m.src, pr)  # re-send a chunk that may be lost
        elif pr.match < self.log.last_index():
            self._send_append(m.src)
        elif m.src == self.lead_transferee:
            # The transferee holds the whole log and answers, yet did not campaign: the
            # TimeoutNow was lost (a transport drops what it queued for a peer whose
            # stream broke: a restarted transferee never sees it). An append answer
            # re-sends it only when match grows, which an idle group never does, so
            # every heartbeat answer does. A duplicate is harmless: the transferee's
            # campaign raised its term, so a later one is stale there.
            self._send(TimeoutNow(src=self.id, dst=m.src, term=self.term))
        if m.context and self._reads and self._counts_progress(m.src):
            for r in self._reads:
                if r.seq > m.context:
                    break
                r.acks.add(m.src)
            self._release_reads()

    def _maybe_commit(self) -> bool:
        """Advance commit to the majority match if that entry is of this term."""
        pr = self.progress
        mci = committed_index(
            self.membership.voters,
            lambda v: pr[v].match if v in pr and self._counts_progress(v) else 0,
        )
        if not self.log.maybe_commit(mci, self.term):
            return False
        if self._reads_waiting:
            waiting, self._reads_waiting = self._reads_waiting, []
            for src, ctx in waiting:
                self._leader_read(src, ctx)
        if self.id not in self.membership.voters and (
            self.log.committed >= self._config_history[-1][0]
        ):
            # our removal is committed: stop leading (the others elect a new leader)
            self._become_follower(self.term, 0)
            return False
        return True

    def _bcast_append(self) -> None:
        for pid in sorted(self.progress):
            if pid != self.id:
                self._send_append(pid, send_if_empty=False)

    def _bcast_heartbeat(self, quiesce: bool = False) -> None:
        ctx = self._reads[-1].seq if self._reads else 0
        # Invariant: a follower left out of this round answered during the last
        # heartbeat interval and was sent an append in it that told it at least the
        # commit this beat would: it heard from this leader (if at all) no less
        # recently, and knows no less, than the beat would have made it. One that did
        # not answer gets the beat, whose answer repairs lost appends
        # (RaftConfig.beats_yield_to_appends).
        yields = (
            self.cfg.beats_yield_to_appends and not quiesce and not ctx and not self.lead_transferee
        )
        for pid in sorted(self.progress):
            if pid == self.id:
                continue
            pr = self.progress[pid]
            commit = min(pr.match, self.log.committed)
            told, pr.appended_commit = pr.appended_commit, -1
            answered, pr.answered = pr.answered, False
            if (
                yields
                and answered
                and told >= commit
                and pr.state is ProgressState.REPLICATE
                and not pr.inflights.full()
            ):
                continue
            self._send(
                Heartbeat(
                    src=self.id,
                    dst=pid,
                    term=self.term,
                    commit=commit,
                    context=ctx,
                    quiesce=quiesce,
                )
            )

    def _send_append(self, to: int, send_if_empty: bool = True) -> None:
        """Send as many appends as the follower's flow state allows."""
        pr = self.progress[to]
        log = self.log
        sent = False
        while not pr.is_paused():
            prev = pr.next - 1
            prev_term = log.term_at(prev)
            last = log.last_index()
            ents = log.slice(pr.next, last + 1, self.cfg.max_msg_bytes)
            if prev_term is None or ents is None:
                self._start_snapshot(to, pr)
                return
            if not ents and (sent or not send_if_empty):
                return
            self._send(
                AppendEntries(
                    src=self.id,
                    dst=to,
                    term=self.term,
                    prev_index=prev,
                    prev_term=prev_term,
                    entries=ents,
                    commit=log.committed,
                )
            )
            pr.sent_entries(ents[-1].index if ents else None, sum(entry_size(e) for e in ents))
            pr.appended_commit = min(log.committed, prev + len(ents))
            sent = True
            if pr.state is not ProgressState.REPLICATE or pr.next > last:
                return

    def _start_snapshot(self, to: int, pr: Progress) -> None:
        meta = self.log.reader.snapshot_meta()
        pr.become_snapshot(meta.index, meta.term)
        self._send_snapshot_chunk(to, pr)

    def _send_snapshot_chunk(self, to: int, pr: Progress) -> None:
        reader = self.log.reader
        meta = reader.snapshot_meta()
        if meta.index != pr.pending_snapshot:  # compacted again meanwhile: start over
            pr.become_snapshot(meta.index, meta.term)
        data, done = reader.snapshot_chunk(pr.snap_offset, self.cfg.snapshot_chunk_bytes)
        self._send(
            InstallSnapshot(
                src=self.id,
                dst=to,
                term=self.term,
                index=meta.index,
                snap_term=meta.term,
                offset=pr.snap_offset,
                data=data,
                done=done,
                meta_data=meta.data,
            )
        )

    def transfer_leader(self, target: int) -> None:
        """Hand leadership to `target` (a voter): catch it up, then TimeoutNow.
        Proposals are refused until it completes or an election timeout passes."""
        self._unquiesce()
        if self.role is not Role.LEADER:
            raise RawNotLeaderError(self.lead)
        if target == self.id or target == self.lead_transferee:
            return
        if target not in self.membership.voters:
            raise ValueError(f"{target} is not a voter")
        self.lead_transferee = target
        self.election_elapsed = 0
        pr = self.progress[target]
        if pr.match == self.log.last_index():
            self._send(TimeoutNow(src=self.id, dst=target, term=self.term))
        else:
            self._send_append(target)
