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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from raftlog.core.log_reader import LogReader, Snapshot, entry_size
from raftlog.core.membership import Membership, is_single_step
from raftlog.core.messages import (
    IDENTITY_LEGACY,
    IDENTITY_SEALED,
    LEADER_TYPES,
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    MsgType,
    ReadIndex,
    ReadIndexResponse,
    RequestVote,
    RequestVoteResponse,
    TimeoutNow,
)
from raftlog.core.progress import Inflights, Progress, ProgressState
from raftlog.core.quorum import VoteResult, committed_index, has_quorum, vote_result
from raftlog.core.raft_log import RaftLog, RaftSafetyError
from raftlog.core.ready import ReadState, Ready, Role, SoftState
from raftlog.entry import EntryType, HardState, LogEntry, SnapshotMeta


class RandomSource(Protocol):
    """What the core needs from `random.Random` (injected; the core owns no RNG)."""

    def randrange(self, start: int, stop: int) -> int: ...


class RawNotLeaderError(Exception):
    """The core refuses a leader-only request. `leader` is the known leader id (0: unknown).

    Internal to raftlog: the runtime translates it into
    `raftlog.runtime.NotLeaderError` (which carries the leader's address), the
    only not-leader error applications see."""

    def __init__(self, leader: int) -> None:
        super().__init__(f"not the leader (leader hint: {leader or 'unknown'})")
        self.leader = leader


class ProposalDroppedError(Exception):
    """The leader refuses the proposal now (leadership transfer, config change)."""


class NotYetAdmissibleError(ProposalDroppedError):
    """A voter to add does not answer from its recorded incarnation yet (it is still
    catching up as a learner, or the leader has not recorded its storage): retry."""


@dataclass(slots=True)
class RaftConfig:
    """Configuration of one `RawNode` (etcd's `Config`). The runtime builds it from
    `raftlog.runtime.NodeOptions`; validated in `RawNode.__init__`."""

    id: int
    """This node's id (>= 1); unique within the group."""
    peers: Sequence[int] = ()
    """Initial voters, used only when neither the snapshot nor the log has a config."""
    learners: Sequence[int] = ()
    """Initial learners (non-voting replicas), under the same condition as peers."""
    election_tick: int = 10
    """T: followers campaign after a random timeout in [T, 2T) ticks."""
    heartbeat_tick: int = 1
    """A leader sends heartbeats every this many ticks; must be < election_tick.
    Heartbeats also carry the commit index to idle followers."""
    pre_vote: bool = True
    """Run a pre-election (Raft thesis 9.6) before incrementing the term: a node
    that cannot win (e.g. partitioned away) does not disrupt the leader by
    forcing a term bump when it rejoins."""
    check_quorum: bool = True
    """A leader steps down after election_tick ticks without hearing from a
    quorum, and followers that heard from a live leader within election_tick
    ignore votes (leader lease), so a deposed leader cannot serve stale reads."""
    max_msg_bytes: int = 1 << 20
    """Cap on the entry payload of one AppendEntries (at least one entry is sent)."""
    max_inflight_msgs: int = 256
    """Pipelined AppendEntries per follower in replicate state before the leader
    waits for acknowledgements (flow control; etcd's MaxInflightMsgs)."""
    max_inflight_bytes: int = 16 << 20
    """As max_inflight_msgs, in entry payload bytes in flight per follower."""
    max_committed_bytes: int = 16 << 20
    """Cap on committed_entries per Ready."""
    snapshot_chunk_bytes: int = 1 << 20
    """Bytes of snapshot data per InstallSnapshot message."""
    applied: int = 0
    """Index the state machine has already applied (e.g. its snapshot) on restart."""
    group_id: int = 0
    """The Raft group this node belongs to; stamped on every message it sends,
    so a transport shared by several groups can route (and reject) by group."""
    incarnation: int = 0
    """This node's storage incarnation (a random id made when the storage was
    created; 0 turns the identity rules off). Stamped on every message."""
    legacy: bool = False
    """The storage predates incarnations and adopted one at this start: until the
    membership records it, it may vote as before (rolling upgrade)."""
    quiesce_ticks: int = 0
    """Quiescence (docs/raft-runtime.md, "Quiescence"; 0: off): a leader idle for
    this many ticks, whose followers all hold and acknowledged its whole log,
    sends one quiesce beat and stops heartbeating; followers that agree stop
    their election timer. The runtime then stops ticking the group and watches
    the leader's process instead (node beats), calling wake()."""


@dataclass(slots=True)
class _PendingRead:
    seq: int
    index: int
    src: int
    context: bytes
    acks: set[int] = field(default_factory=set)


@dataclass(slots=True)
class _SnapRx:
    term: int
    index: int
    snap_term: int
    meta_data: bytes
    buf: bytearray


class RawNode:
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
        # wake(); every message but the current leader's quiesce beat, and every
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
        self._reads: deque[_PendingRead] = deque()
        self._reads_waiting: list[tuple[int, bytes]] = []
        self._read_seq = 0
        self._snap_rx: _SnapRx | None = None
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
            hist = [(meta.index, Membership.of(self.cfg.peers, self.cfg.learners))]
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
    @property
    def promotable(self) -> bool:
        """May campaign: a voter in the current configuration that is not a known
        replacement (before founding it may ask; voters check). A voter removed by
        a configuration that is not committed yet may still campaign (and lead
        until the removal commits): it may hold the only up-to-date log of the
        remaining voters' majority (thesis 4.2.2)."""
        if self.id in self.membership.voters:
            return not self.is_replacement()
        old = self.membership_at(self.log.committed)
        return self.id in old.voters and not self.is_replacement(old)

    def is_replacement(self, m: Membership | None = None) -> bool:
        """The membership knows this node by another storage (or, once founded,
        does not know this new storage at all): it is a replacement until the
        leader records its incarnation through the log."""
        inc = self.cfg.incarnation
        if not inc:
            return False
        m = m if m is not None else self.membership
        recorded = m.incarnation_of(self.id)
        if recorded:
            return recorded != inc
        return m.sealed() and not self.cfg.legacy

    @property
    def may_vote(self) -> bool:
        """May grant votes and count its own: a voter whose storage the membership
        vouches for. A storage the membership does not record yet votes only if it
        predates incarnations (`legacy`) or the cluster is being founded: every
        other voter's newest message says its membership is not sealed either
        (so no configuration recording incarnations, and so no data, exists on
        any of them). A wiped node hears a sealed peer and never votes until
        admitted."""
        if self.id not in self.membership.voters:
            return False
        if not self.cfg.incarnation:
            return True
        if self.is_replacement():
            return False
        if self.membership.incarnation_of(self.id) or self.cfg.legacy:
            return True
        for v in self.membership.voters:
            if v == self.id:
                continue
            seen = self.peer_identity.get(v)
            if seen is None or seen[1] & IDENTITY_SEALED:
                return False
        return True

    def counts(self, node: int, incarnation: int) -> bool:
        """A message or acknowledgement of `node` from storage `incarnation` counts
        toward quorums: the membership records no incarnation for it, or this one."""
        recorded = self.membership.incarnation_of(node)
        return not recorded or recorded == incarnation

    def _counts_progress(self, node: int) -> bool:
        if node == self.id:
            return True
        pr = self.progress.get(node)
        return pr is not None and self.counts(node, pr.incarnation)

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

    # ------------------------------------------------------------ quiescence
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

    def campaign_due(self) -> bool:
        """The next tick() starts a (pre-)campaign: the runtime may hold that tick
        back to spread the elections of many groups (a follower's slower clock
        only delays its election and keeps its vote lease longer)."""
        return (
            not self.quiesced
            and self.role is not Role.LEADER
            and self.election_elapsed + 1 >= self.randomized_timeout
            and self.promotable
        )

    def postpone_election(self, ticks: int) -> None:
        """Campaign `ticks` later than the randomized timeout says (the runtime's
        call for a fresh group's replicas that should not campaign first). Only
        delays: a node without a leader is not in a lease, whatever its clock."""
        if self.role is not Role.LEADER and ticks > 0:
            self.election_elapsed -= ticks

    def identity_change(self) -> Membership | None:
        """The membership change the leader makes next for node identities, if any:
        record incarnations not recorded yet (founding, rolling upgrade), turn a
        member that answers from new storage into a learner with its new
        incarnation (a replacement, `Membership.replace`), and promote such a
        learner back to voter once it holds everything committed."""
        m = self.membership
        record: dict[int, int] = {}
        if not m.incarnation_of(self.id):
            record[self.id] = self.cfg.incarnation
        for pid in sorted(m.members()):
            seen = self.peer_identity.get(pid)
            if pid == self.id or seen is None or not seen[0]:
                continue
            if self._identity_term.get(pid, 0) < self.term:
                # not heard in this term: what it said before may be an older storage
                # than the one recorded (sim seed 3873: a leader "replaced" an admitted
                # node by the incarnation it had before it lost its disk)
                continue
            inc, flags = seen
            recorded = m.incarnation_of(pid)
            if recorded == inc:
                pr = self.progress.get(pid)
                # caught up: it streams appends and holds the (committed) configuration
                # that made it a learner, so everything up to its replacement; waiting
                # for match >= commit could starve under steady load (pipelined
                # appends keep match just below commit)
                if (
                    pid in m.pending
                    and pr is not None
                    and pr.incarnation == inc
                    and pr.state is ProgressState.REPLICATE
                    and pr.match >= self._config_history[-1][0]
                ):
                    return m.add_voter(pid)
            elif recorded == 0 and flags & IDENTITY_LEGACY:
                record[pid] = inc
            else:
                return m.replace(pid, inc)
        return m.with_incarnations(record) if record else None

    def _maybe_admit(self) -> None:
        if self.lead_transferee or self.pending_conf_index > self.log.committed:
            return
        if self.log.term_at(self.log.committed) != self.term:
            return
        change = self.identity_change()
        if change is not None and change != self.membership:
            self.auto_conf_index = self.propose_membership(change)[0]

    def auto_change_in_flight(self) -> bool:
        """The uncommitted membership change is one the leader made for identities
        (an operator's change then waits for it instead of being refused)."""
        pending = self.pending_conf_index
        return pending > self.log.committed and pending == self.auto_conf_index

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

    def _founding_seal(self) -> Membership | None:
        """The configuration recording the incarnations a new leader knows, when its
        membership records none yet (cluster founding or a rolling upgrade).
        A peer that did not say it is legacy is recorded only when this leader is
        new itself (founding: nothing was committed before); in an upgraded
        cluster such a peer may be a wiped node and is left to the replacement path."""
        if not self.cfg.incarnation or self.membership.sealed():
            return None
        incs = {self.id: self.cfg.incarnation}
        for pid in self.membership.members():
            seen = self.peer_identity.get(pid)
            if pid == self.id or seen is None or not seen[0]:
                continue
            if seen[1] & IDENTITY_LEGACY or not self.cfg.legacy:
                incs[pid] = seen[0]
        return self.membership.with_incarnations(incs)

    def _new_progress(self, pid: int, next_index: int) -> Progress:
        return Progress(
            match=0,
            next=next_index,
            inflights=Inflights(self.cfg.max_inflight_msgs, self.cfg.max_inflight_bytes),
            is_learner=pid in self.membership.learners,
            incarnation=self.peer_identity.get(pid, (0, 0))[0],
        )

    def campaign(self, transfer: bool = False) -> None:
        """Start an election: a PreVote round first (if enabled) unless `transfer`
        (TimeoutNow), which also bypasses the voters' leader lease."""
        self._unquiesce()
        self._campaign(pre=self.cfg.pre_vote and not transfer, transfer=transfer)

    def _campaign(self, pre: bool, transfer: bool) -> None:
        if not self.promotable or self.role is Role.LEADER:
            return
        if pre:
            self._become_pre_candidate()
            vote_term = self.term + 1
        else:
            self._become_candidate()
            vote_term = self.term
        self.votes[self.id] = self.may_vote
        if self._tally() is not VoteResult.PENDING:
            return
        last_index, last_term = self.log.last_index(), self.log.last_term()
        for v in sorted(self.membership.voters):
            if v == self.id:
                continue
            self._send(
                RequestVote(
                    src=self.id,
                    dst=v,
                    term=vote_term,
                    last_index=last_index,
                    last_term=last_term,
                    pre_vote=pre,
                    transfer=transfer,
                    voter_incarnation=self.membership.incarnation_of(v),
                    candidate_admitted=bool(self.cfg.incarnation)
                    and self.membership.incarnation_of(self.id) == self.cfg.incarnation,
                )
            )

    def _tally(self) -> VoteResult:
        res = vote_result(self.membership.voters, self.votes)
        if res is VoteResult.WON:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre=False, transfer=False)
            else:
                self._become_leader()
        elif res is VoteResult.LOST:
            self._become_follower(self.term, 0)
        return res

    # ------------------------------------------------------------------ step
    def step(self, m: Message) -> None:
        """Process one message addressed to this node."""
        if m.dst != self.id:
            return
        # A quiesced node wakes on any current or newer message except the
        # leader's quiesce beat repeated; a stale one changes nothing (answered below).
        if (
            self.quiesced
            and not (m.term and m.term < self.term)
            and not (
                m.type is MsgType.HEARTBEAT
                and m.quiesce  # type: ignore[attr-defined]
                and m.term == self.term
                and m.src == self.lead
            )
        ):
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

    def _note_identity(self, m: Message) -> None:
        # The term it was said in, as far as this node can tell: a pre-vote carries
        # its sender's next term (never more than ours counts: a leader acts on what
        # was said in its own term), a forwarded ReadIndex none. Every message still
        # updates the identity (it is what the progress below counts acks by).
        self._identity_term[m.src] = min(m.term, self.term) if m.term else self.term
        self.peer_identity[m.src] = (m.incarnation, m.identity)
        pr = self.progress.get(m.src) if self.role is Role.LEADER else None
        if pr is not None and pr.incarnation != m.incarnation:
            if pr.incarnation:
                # another storage answers for this id: what the old one acknowledged
                # is not on this one; probe it from scratch
                new = self._new_progress(m.src, self.log.last_index() + 1)
                new.recent_active = pr.recent_active
                self.progress[m.src] = pr = new
            pr.incarnation = m.incarnation

    def _handle_vote(self, m: RequestVote) -> None:
        if self.cfg.incarnation and m.voter_incarnation == self.cfg.incarnation:
            refuse = False  # the candidate's (up-to-date) membership admitted this storage
        elif self.id in self.membership.voters:
            refuse = not self.may_vote
        else:
            refuse = self.is_replacement()
        # (a node outside its own configuration votes as in plain Raft: the
        # candidate counts its grant only from the incarnation it records)
        unknown_storage = (
            m.incarnation
            and not self.counts(m.src, m.incarnation)
            # The candidate's own membership admitted its storage and this one has not
            # caught up with that admission: a grant still needs the candidate's log at
            # least as up to date as this one (below), so its membership is the newer
            # one. Refusing could stall the cluster for good: the most up-to-date
            # candidate, known here by its old storage, could never win (sim seed 1698).
            and not m.candidate_admitted
        )
        if refuse or unknown_storage:
            # a node that cannot vouch for its vote record grants nothing, and a
            # candidate on storage the membership does not know gets nothing
            # (at term 0 there is no term to answer with: the candidate times out)
            if self.term:
                self._send(
                    RequestVoteResponse(
                        src=self.id, dst=m.src, term=self.term, granted=False, pre_vote=m.pre_vote
                    )
                )
            return
        can_vote = (
            self.vote == m.src
            or (self.vote == 0 and self.lead == 0)
            or (m.pre_vote and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(m.last_index, m.last_term):
            self._send(
                RequestVoteResponse(
                    src=self.id, dst=m.src, term=m.term, granted=True, pre_vote=m.pre_vote
                )
            )
            if not m.pre_vote:
                self.election_elapsed = 0
                self.vote = m.src
        else:
            self._send(
                RequestVoteResponse(
                    src=self.id, dst=m.src, term=self.term, granted=False, pre_vote=m.pre_vote
                )
            )

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

    def _step_candidate(self, m: Message) -> None:
        t = m.type
        if t in (MsgType.APPEND, MsgType.HEARTBEAT, MsgType.SNAPSHOT):
            self._become_follower(m.term, m.src)
            self._step_follower(m)
        elif t is MsgType.VOTE_RESP:
            assert isinstance(m, RequestVoteResponse)
            if m.pre_vote != (self.role is Role.PRE_CANDIDATE):
                return
            if m.src in self.membership.voters:
                granted = m.granted and (not m.incarnation or self.counts(m.src, m.incarnation))
                self.votes.setdefault(m.src, granted)
                self._tally()

    # ------------------------------------------------------------- follower
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
        self._send(HeartbeatResponse(src=self.id, dst=m.src, term=self.term, context=m.context))

    def _handle_snapshot(self, m: InstallSnapshot) -> None:
        log = self.log
        if m.index <= log.committed:
            self._snap_rx = None
            self._reply_append(m, log.committed)
            return
        rx = self._snap_rx
        if m.offset == 0:
            rx = self._snap_rx = _SnapRx(m.term, m.index, m.snap_term, m.meta_data, bytearray())
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

    # ---------------------------------------------------------------- leader
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
            pr.recent_active = True
            self._handle_append_resp(m, pr)  # type: ignore[arg-type]
        elif t is MsgType.HEARTBEAT_RESP:
            pr.recent_active = True
            self._handle_heartbeat_resp(m, pr)  # type: ignore[arg-type]
        elif t is MsgType.SNAPSHOT_RESP:
            pr.recent_active = True
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
        for pid in sorted(self.progress):
            if pid == self.id:
                continue
            commit = min(self.progress[pid].match, self.log.committed)
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

    def read_index(self, context: bytes) -> None:
        """Request a linearizable read. The answer arrives as a `ReadState` with
        this context in a later Ready (here or, on a follower, via the leader)."""
        self._unquiesce()
        if self.role is Role.LEADER:
            self._leader_read(self.id, context)
        elif self.lead:
            self._send(ReadIndex(src=self.id, dst=self.lead, term=0, context=context))
        else:
            raise RawNotLeaderError(0)

    def _leader_read(self, src: int, context: bytes) -> None:
        if self.log.term_at(self.log.committed) != self.term:
            # the commit index is only known current once an entry of this term commits
            self._reads_waiting.append((src, context))
            return
        self._read_seq += 1
        self._reads.append(
            _PendingRead(self._read_seq, self.log.committed, src, context, {self.id})
        )
        self._release_reads()
        if self._reads:
            self._bcast_heartbeat()

    def _release_reads(self) -> bool:
        """Release the leading reads a quorum confirmed; True if any released."""
        released = False
        voters = self.membership.voters
        while self._reads and has_quorum(voters, self._reads[0].acks):
            r = self._reads.popleft()
            released = True
            if r.src == self.id:
                self._read_states.append(ReadState(r.index, r.context))
            else:
                self._send(
                    ReadIndexResponse(
                        src=self.id, dst=r.src, term=self.term, index=r.index, context=r.context
                    )
                )
        return released

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
