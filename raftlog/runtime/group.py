"""RaftGroup: the asyncio driver of one Raft group around the pure core (braft's pipeline).

A group lives in a RaftHost (host.py), which owns what the groups of a process
share: the transport, the tick loop, the housekeeping loop, the disk writer
thread and the data directory's LogEnvironment. Per group: the core (RawNode),
its log (a DiskQueue over its own LogStore), its snapshots, its FSM calls and
three tasks (raft, persist, apply) that sleep while the group is idle.

    apply() --propose--> core --Ready--> raft loop
        early_messages ----------------------------> transport (before our fsync)
        snapshot / entries / hard state -----------> DiskQueue (one writer, group commit)
    persist loop (Readies in order, each once its disk work is durable):
        messages ----------------------------------> transport
        committed entries -------------------------> apply loop (serial FSM calls)
        core.advance(rd)  (the leader's own vote counts from here)
    apply loop: on_apply in batches, then proposal futures completed by index

Nothing here blocks the event loop on the disk or on the quorum: proposal
futures are parked by index (DLedger's lesson) and completed by the apply loop,
failed when leadership is lost (outcome unknown) or on timeout.

RaftGroup is one class in five modules, one part each; the parts hold no state of
their own (every field is set in RaftGroup.__init__, or in _open for what needs the
storage: core, queue, snapshots, identity): what the host calls in (group_inbound.py:
received messages and the light Readies handled inline, ticks, quiescence,
housekeeping), the apply side (group_apply.py: the apply loop and the snapshots
taken behind it), the client API (group_api.py) and what applications read
(group_surface.py: term, commit index, committed entries, status). This module keeps
the fields, _open, the raft and persist loops (the Ready pipeline), the state
changes and stop.

Beside it: group_storage.py (opening and recovering the group's storage, _open's
first part) and compaction.py (snapshots taken and stored, the log cut behind them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftlog import core
from raftlog.core import Ready, Role
from raftlog.core.log_reader import Snapshot
from raftlog.entry import HardState, LogEntry
from raftlog.runtime.compaction import Compaction
from raftlog.runtime.errors import (
    LeaderChangedError,
    NodeStoppedError,
    NotLeaderError,
)
from raftlog.runtime.group_api import GroupClientMixin, Waiter
from raftlog.runtime.group_apply import GroupApply
from raftlog.runtime.group_inbound import GroupInbound
from raftlog.runtime.group_storage import GroupStorage
from raftlog.runtime.group_surface import GroupReadSurface
from raftlog.runtime.log_adapter import QueueLogReader
from raftlog.runtime.options import NodeOptions
from raftlog.runtime.state_machine import StateMachine
from raftlog.storage import DiskQueue
from raftlog.storage.identity import GroupIdentity

if TYPE_CHECKING:  # the host imports this module
    from raftlog.runtime.host import RaftHost

log = logging.getLogger("raftlog.runtime")


@dataclass(slots=True)
class NodeStats:
    proposals: int = 0
    applied_entries: int = 0
    apply_batches: int = 0
    readies: int = 0
    inline_readies: int = 0
    """Readies handled in the caller, without the raft loop (RaftGroup._ready_inline)."""
    leader_changes: int = 0
    snapshots_taken: int = 0
    snapshots_installed: int = 0
    quiesce_wakes: int = 0
    """Times the host's node liveness woke this group out of quiescence."""


class RaftGroup(GroupInbound, GroupApply, GroupClientMixin, GroupReadSurface):
    """This process's replica of one Raft group, hosted by a RaftHost.

    Create it with RaftHost.add_group (or RaftNode, a host with one group).
    peers: node id -> Raft transport address for every voter (this node too);
    used for the initial configuration (when the log has none) and as leader
    address hints in NotLeaderError. Storage: log_dir / snapshot_dir when given
    (a single-group node's own layout), else the host's LogEnvironment under
    groups/<group id>/. incarnations: the initial configuration's recorded storage
    incarnations (RaftConfig.incarnations: a sealed start, no founding round).
    preferred_leader: the voter that should lead a new group (0: the host's rule,
    voters[group_id mod n] sorted): a fresh group's first election runs there first
    and the other replicas campaign only if it could not (RaftHost's first-election
    stagger, with quiescence on).
    """

    def __init__(
        self,
        host: RaftHost,
        group_id: int,
        peers: dict[int, str],
        fsm: StateMachine,
        options: NodeOptions | None = None,
        seed: int | None = None,
        join: bool = False,
        compaction_limit: Callable[[], int | None] | None = None,
        log_dir: str | None = None,
        snapshot_dir: str | None = None,
        incarnations: dict[int, int] | None = None,
        preferred_leader: int = 0,
    ) -> None:
        node_id = host.node_id
        if node_id not in peers and not join:
            raise ValueError(f"peers must include this node ({node_id})")
        self.host = host
        self.id = node_id
        self.data_dir = host.data_dir or os.path.dirname(log_dir or "")
        self._log_dir = log_dir
        self._snapshot_dir = snapshot_dir
        self.peers = dict(peers)
        # The initial configuration's recorded incarnations (RaftConfig.incarnations)
        self._incarnations = {n: i for n, i in (incarnations or {}).items() if n in peers}
        self.preferred_leader = preferred_leader
        self.fsm = fsm
        self.transport = host.transport
        self.options = options or NodeOptions()
        self.group_id = group_id
        self.stats = NodeStats()
        # A joining node starts with no voters: it never campaigns, and learns
        # the membership from the leader's log (after add_learner/add_voter).
        self._join = join
        # When to snapshot, which snapshots to keep, where to cut the log.
        self._compaction = Compaction(node_id, self.options, compaction_limit)
        self._seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._persist_wake = asyncio.Event()
        self._pipeline: collections.deque[tuple[Ready, asyncio.Future | None, bool]] = (
            collections.deque()
        )
        self._parked_commits = 0
        self._in_ready = False  # the raft loop holds a Ready (see _ready_inline)
        self._apply_q: asyncio.Queue = asyncio.Queue()
        self._waiters: dict[int, Waiter] = {}
        self._proposals: list[tuple[bytes, asyncio.Future, float]] = []
        self._pending_count = 0  # queued + proposed, not yet completed
        self._reads: dict[bytes, Waiter] = {}
        self._read_seq = 0
        self._applied_waiters: list[tuple[int, asyncio.Future]] = []
        self._tasks: list[asyncio.Task] = []
        self._started = False
        self._stopped = False
        self._fatal: BaseException | None = None
        # Why damaged storage stops this group instead of being repaired ("" if not)
        self.repair_refused = ""
        # Public, read-only for applications: leader_id (0: none known now),
        # last_leader_id, role, applied (highest index given to on_apply).
        self.leader_id = 0
        # The last leader this node knew (0: none yet); kept while leaderless so
        # clients can be pointed somewhere better than nowhere.
        self.last_leader_id = 0
        # The term of last_leader_id's leadership (0: none yet): while leaderless, the
        # term may already be a newer one that no leader holds yet.
        self.last_leader_term = 0
        self.role = Role.FOLLOWER
        # Mirrors core.quiesced as the host last heard it (_sync_quiesced).
        self.quiesced = False
        self.applied = 0
        self._leader_started_term = 0
        self._last_hs = HardState()
        self._saved_hs = HardState()
        self._last_checkpoint = time.monotonic()

    # ---------------------------------------------------------------- start

    async def _open(self) -> None:
        """Open storage, recover (snapshot + log), start the group's loops. The
        host registers the group with the transport and ticks it afterwards."""
        self._loop = asyncio.get_running_loop()
        opts = self.options
        host = self.host
        storage = GroupStorage(
            host,
            self.id,
            self.group_id,
            opts,
            len(self.peers) if not self._join else 2,
            self.data_dir,
            self._log_dir,
            self._snapshot_dir,
        )
        self.repair_refused = storage.repair_refused
        opened = await storage.open()
        self.snapshots = opened.snapshots
        self.queue = DiskQueue(opened.store, writer=host.writer)
        if opened.snapshot is not None:
            self.fsm.on_snapshot_load(opened.snapshot.data)
            self.applied = self._compaction.last_index = opened.snapshot.meta.index
        hs = opened.hard_state
        self._last_hs = self._saved_hs = hs
        # None until settled (as before a failed start); its incarnation goes to the core
        self.identity: GroupIdentity | None = None
        self.identity = await storage.settle(opened)
        cfg = core.RaftConfig(
            id=self.id,
            peers=() if self._join else sorted(self.peers),
            incarnations={} if self._join else self._incarnations,
            election_tick=opts.election_ticks,
            heartbeat_tick=opts.heartbeat_ticks,
            beats_yield_to_appends=opts.beats_yield_to_appends,
            max_msg_bytes=opts.max_append_bytes,
            max_inflight_msgs=opts.max_inflight_msgs,
            max_inflight_bytes=opts.max_inflight_bytes,
            pre_vote=opts.pre_vote,
            check_quorum=opts.check_quorum,
            max_committed_bytes=opts.max_committed_bytes,
            snapshot_chunk_bytes=opts.snapshot_chunk_bytes,
            applied=self.applied,
            group_id=self.group_id,
            incarnation=self.identity.incarnation if self.identity else 0,
            legacy=self.identity.legacy if self.identity else False,
            quiesce_ticks=opts.quiesce_ticks if self.host.quiescence_on else 0,
        )
        reader = QueueLogReader(self.queue, self.snapshots)
        self.core = core.RawNode(cfg, reader, random.Random(self._seed), hard_state=hs)
        for coro, name in (
            (self._raft_loop(), "raft"),
            (self._persist_loop(), "persist"),
            (self._apply_loop(), "apply"),
        ):
            self._tasks.append(
                asyncio.create_task(coro, name=f"raft-{self.id}-g{self.group_id}-{name}")
            )
        self._started = True
        log.info(
            "raft.start node=%d group=%d term=%d commit=%d last=%d applied=%d incarnation=%d "
            "identity=%s",
            self.id,
            self.group_id,
            hs.term,
            hs.commit,
            self.queue.last_index(),
            self.applied,
            cfg.incarnation,
            self.identity.reason if self.identity else "off",
        )

    def _check_running(self) -> None:
        if self._stopped or self._fatal is not None:
            raise NodeStoppedError(
                f"node {self.id} is stopped" + (f": {self._fatal!r}" if self._fatal else "")
            )

    # ---------------------------------------------------------------- loops

    async def _raft_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if self._proposals:
                    self._propose_queued()
                    self._sync_quiesced()
                while self.core.has_ready():
                    rd = self.core.ready()
                    self.stats.readies += 1
                    self._in_ready = True
                    try:
                        await self._handle_ready(rd)
                    finally:
                        self._in_ready = False
        except Exception as exc:  # a bug or storage failure: stop loudly
            self._fail(exc)

    async def _handle_ready(self, rd: Ready) -> None:
        if rd.soft_state is not None:
            self._on_soft_state(rd.soft_state)
        if self.leader_id:
            # The known leader's term, read before this Ready's first await (core.term
            # is the Ready's own then); also a term that changed under the same leader
            # (its re-election seen first in its next append: no soft state).
            self.last_leader_term = self.core.term
        if rd.early_messages:
            self.host.send(rd.early_messages)
        last: asyncio.Future | None = None
        if rd.snapshot is not None:
            last = await self._persist_snapshot(rd.snapshot)
        if rd.entries:
            first = rd.entries[0].index
            if first <= self.queue.last_index():
                self._watch_write(self.queue.truncate_suffix(first))
            last = self.queue.append(rd.entries)
        if rd.hard_state is not None:
            self._last_hs = rd.hard_state
            hs = rd.hard_state
            # Term and vote must be durable before the messages; the commit
            # field is only a checkpoint, saved periodically (housekeeping).
            if (hs.term, hs.vote) != (self._saved_hs.term, self._saved_hs.vote):
                last = self.queue.save_hard_state(hs)
                self._saved_hs = hs
        # A committed entry is durable on a quorum: it may be applied before
        # this node's own copy is synced (etcd allows the same with async
        # storage writes), so local fsync stalls stay off the client's path.
        # Order is kept: behind a snapshot (which goes through the ordered
        # path) every later batch waits too.
        parked = False
        if rd.committed_entries:
            if self._parked_commits or rd.snapshot is not None:
                parked = True
                self._parked_commits += 1
            else:
                self._release_committed(rd.committed_entries)
        self._pipeline.append((rd, last, parked))
        self._persist_wake.set()

    def _release_committed(self, entries: list[LogEntry]) -> None:
        self._apply_q.put_nowait(entries)
        self.core.on_applied(entries[-1].index)

    async def _persist_snapshot(self, snap: Snapshot) -> asyncio.Future:
        """A leader's snapshot: the log restarts right after it (it is the new base), and
        this node's own snapshots, all older, go."""
        meta = snap.meta
        await asyncio.to_thread(self.snapshots.save, snap)
        doomed = self.snapshots.forget({meta.index})
        if doomed:
            await asyncio.to_thread(self.snapshots.delete_files, doomed)
        if self.queue.term_at(meta.index) == meta.term and meta.index <= self.queue.last_index():
            self.queue.save_snapshot_meta(meta)
            return self.queue.truncate_prefix(meta.index)
        self.queue.save_snapshot_meta(meta)
        return self.queue.reset(meta.index + 1, meta)

    async def _persist_loop(self) -> None:
        """Readies in order, each once its disk work is durable: send its
        messages, release parked committed entries, report persistence."""
        core_ = self.core
        try:
            while True:
                if not self._pipeline:
                    self._persist_wake.clear()
                    await self._persist_wake.wait()
                    continue
                rd, fut, parked = self._pipeline[0]
                if fut is not None:
                    await fut  # this Ready's writes (and all before them) are durable
                self._pipeline.popleft()
                if rd.messages:
                    self.host.send(rd.messages)
                if rd.hard_state is not None:
                    core_.on_hard_state_persisted(rd.hard_state)
                if rd.snapshot is not None:
                    self.stats.snapshots_installed += 1
                    self._apply_q.put_nowait(rd.snapshot)
                    core_.on_snapshot_persisted(rd.snapshot.meta.index)
                if rd.entries:
                    last = rd.entries[-1]
                    core_.on_persisted(last.index, last.term)
                if parked:
                    self._parked_commits -= 1
                    self._release_committed(rd.committed_entries)
                for rs in rd.read_states:
                    w = self._reads.pop(rs.context, None)
                    if w is not None and not w.future.done():
                        w.future.set_result(rs.index)
                self._wake.set()
        except Exception as exc:
            self._fail(exc)

    # ------------------------------------------------------- state changes

    def _on_soft_state(self, ss: core.SoftState) -> None:
        was_leader = self.role is Role.LEADER
        if ss.lead != self.leader_id:
            self.stats.leader_changes += 1
            log.info(
                "raft.leader node=%d group=%d leader=%d term=%d",
                self.id,
                self.group_id,
                ss.lead,
                self.core.term,
            )
        self.leader_id, self.role = ss.lead, ss.role
        if ss.lead:
            self.last_leader_id = ss.lead
        if was_leader and ss.role is not Role.LEADER:
            self._on_step_down()
            self._leader_started_term = 0
            self.fsm.on_leader_stop()

    def leader_epoch(self) -> int:
        """The term of the leader this node knows, or while it knows none the term of
        the last one it knew: a term no leader holds (yet) is never an epoch. Kafka
        clients validate their position (KIP-320) when a partition's epoch rises, and
        only toward a known leader: an epoch raised while leaderless would be
        validated nowhere, and the leader elected in that term would not raise it again.
        The current term before any leader was known."""
        if self.leader_id or not self.last_leader_term:
            return self.core.term
        return self.last_leader_term

    def _on_step_down(self) -> None:
        """Leadership lost. Proposals only queued (never in the log) fail with
        NotLeaderError: nothing was proposed, a retry is safe. Proposals placed in
        the log keep their waiters: a later leader may still commit them (a
        leadership transfer usually does), and the apply loop settles each one as
        its index is applied here, success if the entry there has the term it was
        proposed in, LeaderChangedError if a later leader replaced it, or the
        proposal timeout says the outcome is unknown. Failing them at once would
        tell a client "failed" for an entry that commits, and a client without
        idempotence would then write it twice. They wait at most outcome_wait_ticks
        (then LeaderChangedError, from _housekeep). Reads need leadership: they fail."""
        self._fail_queued(NotLeaderError(self.leader_id, self.peers.get(self.leader_id)))
        self._pending_count = len(self._waiters)
        wait_until = (
            time.monotonic() + self.options.outcome_wait_ticks * self.options.tick_ms / 1000
        )
        for w in self._waiters.values():
            w.deadline = min(w.deadline, wait_until)
        self._fail_table(self._reads, LeaderChangedError("leadership lost; outcome unknown"))

    def _fail_waiters(self, exc: Exception) -> None:
        self._fail_queued(exc)
        self._pending_count = 0
        self._fail_table(self._waiters, exc)
        self._fail_table(self._reads, exc)

    def _fail_queued(self, exc: Exception) -> None:
        queued, self._proposals = self._proposals, []
        for _, fut, _ in queued:
            if not fut.done():
                fut.set_exception(exc)

    @staticmethod
    def _fail_table(table: dict, exc: Exception) -> None:
        for w in table.values():
            if not w.future.done():
                w.future.set_exception(exc)
        table.clear()

    def _watch_write(self, fut: asyncio.Future) -> None:
        """A disk write nobody awaits (the ordered path awaits a later one): its
        failure stops the group at once, not only when a later write is awaited."""
        fut.add_done_callback(self._on_watched_write)

    def _on_watched_write(self, fut: asyncio.Future) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            self._fail(fut.exception())

    def _fail(self, exc: BaseException) -> None:
        if self._fatal is not None:
            return
        self._fatal = exc
        log.error("raft.fatal node=%d group=%d error=%r", self.id, self.group_id, exc)
        self._fail_waiters(NodeStoppedError(f"node {self.id} stopped: {exc!r}"))
        try:
            self.fsm.on_error(exc)
        finally:
            for t in self._tasks:
                if t is not asyncio.current_task():
                    t.cancel()

    # ----------------------------------------------------------------- stop

    async def _close(self) -> None:
        """Stop the loops, fail pending calls, close storage (the host has
        already stopped routing messages to the group)."""
        if self._stopped:
            return
        self._stopped = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._fail_waiters(NodeStoppedError(f"node {self.id} group {self.group_id} stopped"))
        if self._started:
            await self.queue.close()

    async def stop(self) -> None:
        """Stop this group (the host and its other groups carry on)."""
        await self.host.remove_group(self.group_id, delete=False)

    @property
    def fatal_error(self) -> BaseException | None:
        return self._fatal
