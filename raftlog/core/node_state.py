"""The Raft state machine: roles, terms, votes, replication. No I/O, no clock.

`RawNode` is driven by three kinds of input: `step(message)`, `tick()` (one
logical clock unit; the runtime decides its length) and local requests
(`propose`, `read_index`, `transfer_leader`, membership changes). None of them
performs I/O; the resulting work is collected by `ready()` (see `Ready` for the
ordering each field demands) and acknowledged by `advance(ready)`.

Safety invariants this module maintains (Raft paper, Figure 3):
  * Election safety: a node grants at most one vote per term (vote is part of
    the hard state, durable before the grant is sent).
  * Leader append-only: a leader never truncates its own log.
  * Log matching: a follower accepts entries only after (prev_index, prev_term)
    matches, and truncates only from the first conflicting entry.
  * Leader completeness: votes go only to candidates whose log is at least as
    up to date; a leader commits by counting replicas only for entries of its
    current term.
  * Disks forget (docs/raft-core.md, "Node identity"): with an incarnation
    configured, a node votes only while the membership records its own
    incarnation (or, before the cluster is founded, after the founding check),
    and a leader counts a member's acknowledgements, votes and read acks only
    from the incarnation the membership records.

`RawNode` is one class in several modules, one part each, holding no state of their
own (every field is set in `RawNode.__init__`): elections (`election.py`), node
identity (`identity.py`), the leader's and the follower's sides of replication
(`leader.py`, `follower.py`), ReadIndex (`reads.py`) and quiescence
(`quiescence.py`). This module keeps the fields, the Ready cycle, the role
changes, the dispatch of `step`, the log and configuration tracking and the
proposals.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from raftlog.core.config import (
    NotYetAdmissibleError,
    ProposalDroppedError,
    RaftConfig,
    RandomSource,
    RawNotLeaderError,
)
from raftlog.core.election import Elections
from raftlog.core.follower import FollowerSide, IncomingSnapshot
from raftlog.core.identity import IdentityRules
from raftlog.core.leader import LeaderSide
from raftlog.core.log_reader import LogReader, Snapshot
from raftlog.core.membership import Membership, is_single_step
from raftlog.core.messages import (
    IDENTITY_LEGACY,
    IDENTITY_SEALED,
    LEADER_TYPES,
    AppendEntriesResponse,
    Message,
    MsgType,
    RequestVote,
    RequestVoteResponse,
)
from raftlog.core.progress import Inflights, Progress
from raftlog.core.quiescence import Quiescence
from raftlog.core.raft_log import RaftLog
from raftlog.core.reads import PendingRead, Reads
from raftlog.core.ready import ReadState, Ready, Role, SoftState
from raftlog.entry import EntryType, HardState, LogEntry, SnapshotMeta


class RawNode(IdentityRules, Elections, Quiescence, FollowerSide, LeaderSide, Reads):
    """One Raft peer, thread-unsafe and I/O-free (etcd's `RawNode`). See the module
    docstring and `Ready`. Applications use `raftlog.runtime.RaftNode`, the asyncio
    driver around it, and never this class directly."""

    def __init__(
        self,
        config: RaftConfig,
        reader: LogReader,
        rng: RandomSource,
        hard_state: HardState | None = None,
    ) -> None:
        if config.id < 1:
            raise ValueError("node ids are >= 1")
        if config.heartbeat_tick >= config.election_tick:
            raise ValueError("heartbeat_tick must be < election_tick")
        stray = set(config.incarnations) - set(config.peers) - set(config.learners)
        if stray or not all(0 < i < 1 << 63 for i in config.incarnations.values()):
            raise ValueError(
                f"initial incarnations {dict(config.incarnations)}: for peers or "
                "learners only, each in [1, 2**63)"
            )
        hs = hard_state or HardState()
        self.cfg = config
        self.id = config.id
        self.rng = rng
        self.log = RaftLog(reader, committed=hs.commit, applied=config.applied)
        self.term = hs.term
        self.vote = hs.vote
        self.lead = 0
        self.role = Role.FOLLOWER
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = config.election_tick
        # Quiesced: no heartbeats (leader) or no election timer (follower) until
        # wake(); every current message but the current leader's quiesce beat and a
        # follower's late answer to a plain beat (Quiescence._wakes), and every
        # proposal, read, transfer or campaign, wakes the node.
        self.quiesced = False
        self._idle_ticks = 0  # a leader's consecutive ticks in a quiescible state
        # Peers that answered during the previous CheckQuorum window: with the
        # current window's marks, "answered within the last 2T ticks" (a leader
        # whose answers take several ticks must still be able to quiesce).
        self._answered_last_window: set[int] = set()
        self.votes: dict[int, bool] = {}
        # (term, index): this term's leader verified our log up to index (AppendEntries
        # log matching); a replacement commits no further on a heartbeat
        self._verified: tuple[int, int] = (0, 0)
        self.progress: dict[int, Progress] = {}
        self.lead_transferee = 0
        self.pending_conf_index = 0
        self.auto_conf_index = 0
        self._msgs: list[Message] = []
        self._msgs_early: list[Message] = []
        self._read_states: list[ReadState] = []
        self._reads: deque[PendingRead] = deque()
        self._reads_waiting: list[tuple[int, bytes]] = []
        self._read_seq = 0
        self._snap_rx: IncomingSnapshot | None = None
        self._hs_sent = HardState(hs.term, hs.vote, self.log.committed)
        self._hs_durable = self._hs_sent
        self._soft_sent = SoftState(0, Role.FOLLOWER)
        # peer id -> (incarnation, IDENTITY_* flags) from its newest message
        self.peer_identity: dict[int, tuple[int, int]] = {}
        # peer id -> the term peer_identity was heard in: a replacement is decided
        # only on what a node said in the leader's own term, never on what it said
        # long ago (its storage may have been replaced and admitted since)
        self._identity_term: dict[int, int] = {}
        self._config_history: list[tuple[int, Membership]] = self._load_config_history(reader)
        self.membership = self._config_history[-1][1]
        self._reset_randomized_timeout()

    # ------------------------------------------------------------------ setup
    def _load_config_history(self, reader: LogReader) -> list[tuple[int, Membership]]:
        meta = reader.snapshot_meta()
        if meta.data:
            hist = [(meta.index, Membership.decode(meta.data))]
        else:
            boot = Membership.of(self.cfg.peers, self.cfg.learners, self.cfg.incarnations)
            hist = [(meta.index, boot)]
        finder = getattr(reader, "config_entries", None)
        if finder is not None:
            # Storage indexes CONFIG entries: restart cost does not grow with the log.
            hist.extend((e.index, Membership.decode(e.data)) for e in finder())
            return hist
        lo, hi = reader.first_index(), reader.last_index() + 1
        while lo < hi:  # readers without a config index: one pass over the stable log
            batch = reader.entries(lo, hi, 4 << 20)
            for e in batch:
                if e.type is EntryType.CONFIG:
                    hist.append((e.index, Membership.decode(e.data)))
            lo = batch[-1].index + 1
        return hist

    def _reset_randomized_timeout(self) -> None:
        t = self.cfg.election_tick
        self.randomized_timeout = self.rng.randrange(t, 2 * t)

    # --------------------------------------------------------------- queries
    def membership_at(self, index: int) -> Membership:
        m = self._config_history[0][1]
        for i, c in self._config_history:
            if i > index:
                break
            m = c
        return m

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def soft_state(self) -> SoftState:
        return SoftState(self.lead, self.role)

    # ------------------------------------------------------------ ready cycle
    def has_ready(self) -> bool:
        # Field by field rather than hard_state() != _hs_sent: the runtime asks this
        # several times per Ready of every group, and building the tuples to compare
        # them was most of its cost.
        if self._msgs or self._msgs_early or self._read_states:
            return True
        hs, ss, log = self._hs_sent, self._soft_sent, self.log
        if (
            self.term != hs.term
            or self.vote != hs.vote
            or log.committed != hs.commit
            or self.lead != ss.lead
            or self.role is not ss.role
        ):
            return True
        u = log.unstable
        return bool(
            (u.snapshot is not None and not u.snapshot_in_progress)
            or log.has_unsent_entries()
            or log.has_next_committed()
        )

    def ready_is_light(self) -> bool:
        """The pending Ready (if any) needs no storage write and changes no role: no
        entries, no snapshot, the term and vote and the leader and role as handed
        out last. What it can hold: messages, committed entries, a commit index,
        read states. A runtime with nothing of an earlier Ready in flight may
        handle such a Ready inline, without its disk pipeline (RaftGroup's
        _ready_inline): heartbeats and their answers are most Readies of a host
        with many groups."""
        hs, ss = self._hs_sent, self._soft_sent
        u = self.log.unstable
        return (
            self.term == hs.term
            and self.vote == hs.vote
            and self.lead == ss.lead
            and self.role is ss.role
            and u.snapshot is None
            and not self.log.has_unsent_entries()
        )

    def ready(self) -> Ready:
        """Hand out the pending work; each item is handed out once."""
        rd = Ready()
        ss = self.soft_state()
        if ss != self._soft_sent:
            rd.soft_state = self._soft_sent = ss
        hs = self.hard_state()
        if hs != self._hs_sent:
            rd.hard_state = self._hs_sent = hs
        u = self.log.unstable
        if u.snapshot is not None and not u.snapshot_in_progress:
            rd.snapshot = u.snapshot
            u.snapshot_in_progress = True
        ents = self.log.unsent_entries()
        if ents:
            rd.entries = ents
            u.in_progress = ents[-1].index
        committed = self.log.next_committed(self.cfg.max_committed_bytes)
        if committed:
            rd.committed_entries = committed
            self.log.applying = committed[-1].index
        durable = self._hs_durable
        if durable.term == self.term and durable.vote == self.vote:
            rd.early_messages = self._msgs_early
            rd.messages = self._msgs
        else:
            rd.messages = self._msgs_early + self._msgs
        self._msgs_early = []
        self._msgs = []
        if self._read_states:
            rd.read_states = self._read_states
            self._read_states = []
        return rd

    def advance(self, rd: Ready) -> None:
        """Report that `rd` was fully processed: persisted, sent, applied."""
        if rd.hard_state is not None:
            self.on_hard_state_persisted(rd.hard_state)
        if rd.snapshot is not None:
            self.on_snapshot_persisted(rd.snapshot.meta.index)
        if rd.entries:
            last = rd.entries[-1]
            self.on_persisted(last.index, last.term)
        if rd.committed_entries:
            self.on_applied(rd.committed_entries[-1].index)

    def on_hard_state_persisted(self, hs: HardState) -> None:
        self._hs_durable = hs

    def on_snapshot_persisted(self, index: int) -> None:
        u = self.log.unstable
        if u.snapshot is not None and u.snapshot.meta.index == index:
            u.snapshot = None
            u.snapshot_in_progress = False

    def on_persisted(self, index: int, term: int) -> None:
        """Entries up to (index, term) are durable. Ignored if that entry was
        since replaced by a truncation. The leader counts its own vote here."""
        self.log.unstable.stable_to(index, term)
        if self.role is Role.LEADER and self.log.term_at(index) == term:
            pr = self.progress.get(self.id)
            if pr is not None and pr.maybe_update(index) and self._maybe_commit():
                self._bcast_append()

    def on_applied(self, index: int) -> None:
        if index > self.log.applied:
            self.log.applied = min(index, self.log.applying)

    # ---------------------------------------------------------------- sending
    def _send(self, m: Message) -> None:
        m.group_id = self.cfg.group_id
        if self.cfg.incarnation:
            m.incarnation = self.cfg.incarnation
            m.identity = (IDENTITY_SEALED if self.membership.sealed() else 0) | (
                IDENTITY_LEGACY if self.cfg.legacy else 0
            )
        if m.term == 0 and m.type is not MsgType.READ_INDEX:
            m.term = self.term
        if self.role is Role.LEADER and m.type in LEADER_TYPES:
            self._msgs_early.append(m)
        else:
            self._msgs.append(m)

    # ---------------------------------------------------------------- tick
    def tick(self) -> None:
        """Advance the logical clock by one tick (a quiesced node's clock stands still)."""
        if self.quiesced:
            return
        if self.role is Role.LEADER:
            self._tick_leader()
        else:
            self.election_elapsed += 1
            if self.promotable and self.election_elapsed >= self.randomized_timeout:
                self.election_elapsed = 0
                self.campaign()

    # ---------------------------------------------------------- role changes
    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = 0
        self.lead = 0
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.quiesced = False
        self._idle_ticks = 0
        self._answered_last_window = set()
        self._reset_randomized_timeout()
        self.lead_transferee = 0
        self.votes = {}
        self.progress = {}
        self.pending_conf_index = 0
        self.auto_conf_index = 0
        self._reads.clear()
        self._reads_waiting.clear()

    def _become_follower(self, term: int, lead: int) -> None:
        self._reset(term)
        self.lead = lead
        self.role = Role.FOLLOWER

    def _become_pre_candidate(self) -> None:
        # no term or vote change: a pre-vote must not disturb anyone's state
        self.votes = {}
        self.lead = 0
        self.role = Role.PRE_CANDIDATE

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.lead = self.id
        self.role = Role.LEADER
        last = self.log.last_index()
        for pid in self.membership.members() | {self.id}:
            self.progress[pid] = self._new_progress(pid, last + 1)
        me = self.progress[self.id]
        me.match = self.log.stable_last()
        me.recent_active = True
        # no config change until everything up to here (incl. the no-op) commits
        self.pending_conf_index = last
        ents = [LogEntry(last + 1, self.term, EntryType.NOOP, b"")]
        seal = self._founding_seal()
        if seal is not None:
            # Record the founders' incarnations before any data can follow: every
            # later entry commits only after this one. Quorums do not change.
            ents.append(LogEntry(last + 2, self.term, EntryType.CONFIG, seal.encode()))
            self.pending_conf_index = last + 2
        self._append(ents)
        self._bcast_append()

    def _new_progress(self, pid: int, next_index: int) -> Progress:
        return Progress(
            match=0,
            next=next_index,
            inflights=Inflights(self.cfg.max_inflight_msgs, self.cfg.max_inflight_bytes),
            is_learner=pid in self.membership.learners,
            incarnation=self.peer_identity.get(pid, (0, 0))[0],
        )

    # ------------------------------------------------------------------ step
    def step(self, m: Message) -> None:
        """Process one message addressed to this node."""
        if m.dst != self.id:
            return
        # A stale message changes nothing (answered below).
        if self.quiesced and not (m.term and m.term < self.term) and self._wakes(m):
            self._unquiesce()
        if m.incarnation:
            self._note_identity(m)
        if m.term == 0:
            # Only a forwarded ReadIndex is term-less (_send stamps every other message with
            # the sender's term, and terms start at 1). Anything else with term 0 is malformed
            # or forged: stepping it as current-term would let it append to the log.
            if m.type is not MsgType.READ_INDEX:
                return
        elif m.term > self.term:
            if m.type is MsgType.VOTE:
                assert isinstance(m, RequestVote)
                in_lease = (
                    self.cfg.check_quorum
                    and self.lead != 0
                    and self.election_elapsed < self.cfg.election_tick
                )
                if in_lease and not m.transfer:
                    return  # leader lease: a live leader exists; ignore the (pre)vote
                if not m.pre_vote:
                    self._become_follower(m.term, 0)
            elif m.type is MsgType.VOTE_RESP and m.pre_vote and m.granted:  # type: ignore[attr-defined]
                pass  # granted pre-votes carry the future term
            else:
                self._become_follower(m.term, m.src if m.type in LEADER_TYPES else 0)
        elif m.term < self.term:
            if m.type in (MsgType.APPEND, MsgType.HEARTBEAT) and (
                self.cfg.check_quorum or self.cfg.pre_vote or not self.promotable
            ):
                # tell a stale leader about the newer term so it steps down. Plain Raft
                # may stay silent (this node's own campaign will raise the term), but a
                # node that may not campaign (a replacement, a learner) never would: the
                # leader would heartbeat it at the old term forever (sim seed 1818)
                self._send(AppendEntriesResponse(src=self.id, dst=m.src, term=self.term, index=0))
            elif m.type is MsgType.VOTE:
                # refused with the newer term (the Raft paper's rule; etcd answers only
                # pre-votes): a candidate that hears no newer term from anyone else (its
                # membership lists this node, this node's does not list it, the others
                # may not vote) would campaign at stale terms forever (sim seed 2634)
                self._send(
                    RequestVoteResponse(
                        src=self.id,
                        dst=m.src,
                        term=self.term,
                        granted=False,
                        pre_vote=m.pre_vote,  # type: ignore[attr-defined]
                    )
                )
            return

        if m.type is MsgType.VOTE:
            assert isinstance(m, RequestVote)
            self._handle_vote(m)
        elif self.role is Role.LEADER:
            self._step_leader(m)
        elif self.role is Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    # -------------------------------------------------------------- appending
    def _append(self, ents: list[LogEntry]) -> None:
        """Append to the log (truncating from ents[0]) and track configurations:
        the newest CONFIG entry in the log is in force, committed or not."""
        first = ents[0].index
        self.log.append(ents)
        hist = self._config_history
        changed = False
        while len(hist) > 1 and hist[-1][0] >= first:
            hist.pop()
            changed = True
        for e in ents:
            if e.type is EntryType.CONFIG:
                hist.append((e.index, Membership.decode(e.data)))
                changed = True
        if changed:
            self._set_membership(hist[-1][1])

    def _set_membership(self, new: Membership) -> None:
        self.membership = new
        if self.role is not Role.LEADER:
            return
        last = self.log.last_index()
        for pid in new.members():
            if pid not in self.progress:
                self.progress[pid] = self._new_progress(pid, last + 1)
            self.progress[pid].is_learner = pid in new.learners
        for pid in list(self.progress):
            if pid != self.id and pid not in new.members():
                del self.progress[pid]
        if self.lead_transferee and self.lead_transferee not in new.voters:
            self.lead_transferee = 0

    # ------------------------------------------------------- client requests
    def propose(self, data: bytes, entry_type: EntryType = EntryType.DATA) -> tuple[int, int]:
        """Append a command; returns its (index, term). The entry is committed
        when the commit index reaches index while the entry at index still has
        this term (the runtime parks futures by index, DLedger-style)."""
        return self.propose_batch([data], entry_type)[0]

    def propose_batch(
        self, datas: Sequence[bytes], entry_type: EntryType = EntryType.DATA
    ) -> list[tuple[int, int]]:
        self._unquiesce()
        if self.role is not Role.LEADER:
            raise RawNotLeaderError(self.lead)
        if self.lead_transferee:
            raise ProposalDroppedError(f"leadership transfer to {self.lead_transferee}")
        if entry_type is EntryType.CONFIG:
            raise ValueError("use propose_membership for CONFIG entries")
        last = self.log.last_index()
        ents = [LogEntry(last + 1 + i, self.term, entry_type, d) for i, d in enumerate(datas)]
        if not ents:
            return []
        self._append(ents)
        self._bcast_append()
        return [(e.index, e.term) for e in ents]

    def propose_membership(self, new: Membership) -> tuple[int, int]:
        """Propose a single-server membership change (see membership.py)."""
        self._unquiesce()
        if self.role is not Role.LEADER:
            raise RawNotLeaderError(self.lead)
        if self.lead_transferee:
            raise ProposalDroppedError("leadership transfer in progress")
        if self.pending_conf_index > self.log.committed:
            raise ProposalDroppedError("a membership change is still uncommitted")
        if self.log.term_at(self.log.committed) != self.term:
            raise ProposalDroppedError("no entry of the current term committed yet")
        if not is_single_step(self.membership, new):
            raise ValueError(f"not a single-server change: {self.membership} -> {new}")
        if self.cfg.incarnation and new.sealed():
            for v in new.voters - self.membership.voters:
                recorded = new.incarnation_of(v)
                pr = self.progress.get(v)
                if not recorded or pr is None or pr.incarnation != recorded:
                    # a voter must be known by its storage: it catches up as a
                    # learner, the leader records the incarnation it answers
                    # from, then it is promoted (else the new quorum could
                    # include a member whose acknowledgements never count)
                    raise NotYetAdmissibleError(
                        f"node {v} does not answer from its recorded incarnation yet: add "
                        "it as a learner and promote it once it has caught up"
                    )
        index = self.log.last_index() + 1
        self._append([LogEntry(index, self.term, EntryType.CONFIG, new.encode())])
        self.pending_conf_index = index
        self._bcast_append()
        return index, self.term

    # ------------------------------------------------------------- snapshots
    def compact(self, index: int, data: bytes) -> Snapshot:
        """The application snapshotted its state at applied `index`. Returns the
        Snapshot (with the membership at `index`) for the runtime to store; the
        runtime then discards log entries <= index from storage."""
        if index > self.log.applied:
            raise ValueError(f"snapshot index {index} > applied {self.log.applied}")
        if index > self.log.stable_last():
            raise ValueError(f"snapshot index {index} not yet durable")
        term = self.log.term_at(index)
        if term is None or index < self.log.reader.snapshot_meta().index:
            raise ValueError(f"index {index} already compacted")
        m = self.membership_at(index)
        hist = self._config_history
        while len(hist) > 1 and hist[1][0] <= index:
            hist.pop(0)
        return Snapshot(SnapshotMeta(index, term, m.encode()), data)

    # --------------------------------------------------------------- helpers
    def add_learner(self, node: int) -> tuple[int, int]:
        return self.propose_membership(self.membership.add_learner(node))

    def add_voter(self, node: int) -> tuple[int, int]:
        return self.propose_membership(self.membership.add_voter(node))

    def remove_node(self, node: int) -> tuple[int, int]:
        return self.propose_membership(self.membership.remove(node))

    def __repr__(self) -> str:
        return (
            f"RawNode(id={self.id}, {self.role.value}, term={self.term}, lead={self.lead}, "
            f"commit={self.log.committed}, last={self.log.last_index()})"
        )
