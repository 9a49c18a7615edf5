"""A follower's side of replication: AppendEntries with the log matching check,
heartbeats carrying the commit index, snapshots received in chunks.

Log matching: a follower accepts entries only after (prev_index, prev_term)
matches, and truncates only from the first conflicting entry, never at or below
its commit index (that would be a safety violation: RaftSafetyError).
"""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.core.log_reader import Snapshot
from raftlog.core.membership import Membership
from raftlog.core.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    MsgType,
    ReadIndexResponse,
)
from raftlog.core.raft_log import RaftSafetyError
from raftlog.core.ready import ReadState
from raftlog.entry import SnapshotMeta


@dataclass(slots=True)
class IncomingSnapshot:
    """A leader's snapshot being received chunk by chunk (offsets must follow on)."""

    term: int
    index: int
    snap_term: int
    meta_data: bytes
    buf: bytearray


class FollowerSide:
    """The follower part of `RawNode` (a part of it: every field is RawNode's, set in its
    `__init__`; this class holds no state of its own)."""

    def _step_follower(self, m: Message) -> None:
        t = m.type
        if t in (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT):
            self.election_elapsed = 0
            self.lead = m.src
            if t is MsgType.APPEND:
                self._handle_append(m)  # type: ignore[arg-type]
            elif t is MsgType.HEARTBEAT:
                self._handle_heartbeat(m)  # type: ignore[arg-type]
            else:
                self._handle_snapshot(m)  # type: ignore[arg-type]
        elif t is MsgType.TIMEOUT_NOW:
            self.campaign(transfer=True)
        elif t is MsgType.READ_INDEX_RESP:
            assert isinstance(m, ReadIndexResponse)
            self._read_states.append(ReadState(m.index, m.context))

    def _reply_append(self, m: Message, index: int, **kw: int) -> None:
        self._send(AppendEntriesResponse(src=self.id, dst=m.src, term=self.term, index=index, **kw))

    def _handle_append(self, m: AppendEntries) -> None:
        log = self.log
        if m.prev_index < log.committed:
            self._reply_append(m, log.committed)
            return
        if log.match_term(m.prev_index, m.prev_term):
            ents = m.entries
            last_new = m.prev_index + len(ents)
            ci = log.find_conflict(ents)
            if ci:
                if ci <= log.committed:
                    raise RaftSafetyError(f"conflict at {ci} <= committed {log.committed}")
                self._append(ents[ci - m.prev_index - 1 :])
            log.commit_to(min(m.commit, last_new))
            if self._verified[0] != self.term or self._verified[1] < last_new:
                self._verified = (self.term, last_new)
            self._reply_append(m, last_new)
            return
        hint = min(m.prev_index, log.last_index())
        hint, hint_term = log.find_conflict_by_term(hint, m.prev_term)
        self._send(
            AppendEntriesResponse(
                src=self.id,
                dst=m.src,
                term=self.term,
                index=m.prev_index,
                reject=True,
                reject_hint=hint,
                log_term=hint_term,
            )
        )

    def _handle_heartbeat(self, m: Heartbeat) -> None:
        limit = self.log.last_index()
        if self.is_replacement():
            # The leader's commit for us is min(its commit, the match it recorded for this
            # node), and that match may be of the storage this node lost: our log may hold
            # other entries there (from an older leader). Commit only what this term's
            # leader has verified by an AppendEntries (found by the simulator, seed 645
            # with the middle_and_vote loss kind: a stale match committed a term-2 entry).
            term, verified = self._verified
            limit = min(limit, verified if term == self.term else self.log.committed)
        self.log.commit_to(min(m.commit, limit))
        if m.quiesce and self.cfg.quiesce_ticks:
            log = self.log
            if log.committed == m.commit == log.last_index() == log.stable_last() and (
                log.unstable.snapshot is None and self._snap_rx is None
            ):
                # Same term (step checked it), same leader, whole log committed and
                # durable: nothing can happen in this group until someone speaks.
                # No answer: the leader quiesced already; an answer would wake it.
                self.quiesced = True
                return
        self._unquiesce()  # a quiesce beat we cannot agree with: answer, awake
        self._send(
            HeartbeatResponse(
                src=self.id, dst=m.src, term=self.term, context=m.context, quiesce=m.quiesce
            )
        )

    def _handle_snapshot(self, m: InstallSnapshot) -> None:
        log = self.log
        if m.index <= log.committed:
            self._snap_rx = None
            self._reply_append(m, log.committed)
            return
        rx = self._snap_rx
        if m.offset == 0:
            rx = self._snap_rx = IncomingSnapshot(
                m.term, m.index, m.snap_term, m.meta_data, bytearray()
            )
        elif (
            rx is None
            or (rx.index, rx.snap_term, rx.term) != (m.index, m.snap_term, m.term)
            or m.offset != len(rx.buf)
        ):
            same = rx is not None and (rx.index, rx.snap_term) == (m.index, m.snap_term)
            expected = len(rx.buf) if same and rx is not None else 0
            self._send(
                InstallSnapshotResponse(
                    src=self.id, dst=m.src, term=self.term, index=m.index, next_offset=expected
                )
            )
            return
        rx.buf += m.data
        if not m.done:
            self._send(
                InstallSnapshotResponse(
                    src=self.id, dst=m.src, term=self.term, index=m.index, next_offset=len(rx.buf)
                )
            )
            return
        self._snap_rx = None
        snap = Snapshot(SnapshotMeta(m.index, m.snap_term, rx.meta_data), bytes(rx.buf))
        self._restore(snap)
        self._reply_append(m, log.committed)

    def _restore(self, snap: Snapshot) -> bool:
        """Install a leader's snapshot unless the log already covers it."""
        meta = snap.meta
        if meta.index <= self.log.committed:
            return False
        if self.log.match_term(meta.index, meta.term):
            self.log.commit_to(meta.index)  # we have the entries; just fast-forward
            return False
        self.log.restore(snap)
        self._config_history = [(meta.index, Membership.decode(meta.data))]
        self._set_membership(self._config_history[-1][1])
        return True
