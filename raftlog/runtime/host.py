"""RaftHost: the Raft runtime of one process, hosting many Raft groups.

Shared by every group of the process (one each):
    transport     one connection per peer carrying every group's messages
    tick loop     ticks every group's core, then wakes only groups with work
    housekeeping  proposal/read timeouts and commit checkpoints of every group
    DiskWriter    one writer thread: a round writes each group's appends to its
                  own file and ends with ONE fsync round over all of them
    LogEnvironment  the data directory: one LMDB index, groups/<id>/ per group
    coalescer     heartbeats and heartbeat responses of all groups to a peer
                  leave as one message per flush (transport/beats.py)
Per group (RaftGroup, group.py): the core, its log and snapshots, its FSM calls.

Invariants:
- A group id is hosted at most once; HOST_GROUP_ID is never a group id (the
  coalesced beats travel under it).
- A coalesced beat is expanded into the core's own Heartbeat/HeartbeatResponse
  and stepped into its group's core, so every per-group rule (term checks,
  CheckQuorum, ReadIndex confirmation) is the core's, unchanged. Rows for a
  group not hosted here are dropped alone and counted (unknown_group_beats).
- Every group shares the host's tick: a group's NodeOptions.tick_ms must
  equal the host's.
- Quiescence (docs/raft-runtime.md, "Quiescence"): the tick loop ticks only the
  groups whose core is not quiesced (_ticking; a group reports every change
  through _on_quiesce_change). Node liveness stands in for the quiesced
  groups' heartbeats: every node_beat_ticks every peer gets at least one Beats
  (empty if no group beats it) carrying this process's start nonce. A peer is
  *down* when it was silent for the randomized silence limit (seconds, well
  above the election timeout: a starved live process must not look dead;
  counted in ticks this loop ran, so a stalled loop never declares anyone
  dead), or when the transport says its stream broke and has not come back
  and it was silent for T ticks (a killed process; a starved one keeps its
  connections). A down or restarted (new nonce) peer wakes the quiesced
  groups it leads (their followers campaign) and the quiesced leaders that
  lost a quorum of live voter processes (their CheckQuorum runs again). The
  host only decides *when*; the core's wake() decides what it means.
- Elections are rate-limited per host: at most campaigns_per_tick groups start
  a (pre-)campaign per tick (RawNode.campaign_due); the others' ticks wait,
  which only delays their elections. A fresh group's replicas other than its
  preferred first candidate (voters[gid mod n]) wait T ticks more, so 1,000
  new groups mostly elect without competing candidates.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raftlog.core import Role
from raftlog.core.liveness import NodeLiveness, liveness_wakes
from raftlog.core.messages import Message, MsgType
from raftlog.runtime.group import RaftGroup
from raftlog.runtime.options import HostOptions, NodeOptions
from raftlog.runtime.state_machine import StateMachine
from raftlog.storage import DiskWriter, LogEnvironment, LogStore, StorageOptions
from raftlog.storage.identity import IdentityError, IdentityFile
from raftlog.transport.beats import (
    COALESCED_KINDS,
    HOST_GROUP_ID,
    Beats,
    BeatsResponse,
    coalesce,
    coalescible,
    expand,
)

log = logging.getLogger("raftlog.runtime")


@dataclass(slots=True)
class HostStats:
    """Counters of a host; monotonic."""

    ticks: int = 0
    ticks_skipped: int = 0
    """Ticks not run because the loop fell behind by more than one tick."""
    beats_messages_sent: int = 0
    """Coalesced messages sent (Beats + BeatsResponse)."""
    beat_rows_sent: int = 0
    """Group heartbeats (and responses) carried by them."""
    beat_rows_received: int = 0
    unknown_group_beats: int = 0
    """Received beat rows for a group not hosted here (dropped alone)."""
    node_beats_sent: int = 0
    """Empty Beats sent because no group had a beat for that peer this tick."""
    peers_declared_down: int = 0
    """Times a peer process fell silent for its randomized election timeout."""
    peer_restarts_seen: int = 0
    """Times a peer's Beats came with a new start nonce."""
    liveness_wakes: int = 0
    """Quiesced groups woken by node liveness (a silent or restarted peer)."""
    peers_seen_broken: int = 0
    """Peers declared down on the transport's evidence (broken stream + T silent ticks)."""
    campaigns_deferred: int = 0
    """Group ticks held back because campaigns_per_tick groups campaigned already."""


_STALL_DRAIN_ROUNDS = 4
"""Loop rounds run after a stall before leaders replay its ticks (see _ticker)."""

_PEER_REFRESH_TICKS = 32
"""How often the set of peers owed node beats is recomputed from the groups'
peers (membership changes add peers without telling the host)."""


class RaftHost:
    """One per process: hosts Raft groups over one transport and one disk writer.

    data_dir: the LogEnvironment root (None: every group brings its own
    log_dir, as the single-group RaftNode does). transport: a GrpcTransport or
    LocalTransport, started and closed by the host.
    """

    def __init__(
        self,
        node_id: int,
        transport: Any,
        data_dir: str | None = None,
        options: HostOptions | None = None,
    ) -> None:
        self.node_id = node_id
        self.transport = transport
        self.data_dir = data_dir
        self.options = options or HostOptions()
        self.stats = HostStats()
        self.groups: dict[int, RaftGroup] = {}
        self.env: LogEnvironment | None = None
        self.writer: DiskWriter | None = None
        self._tasks: list[asyncio.Task] = []
        self._started = False
        self._closed = False
        self._out: list[Message] = []  # beats waiting for this iteration's flush
        self._answers: list[Message] = []  # heartbeat answers waiting for the next beat tick
        self._held: list[Message] = []  # context-less beats waiting for the next beat tick
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._identities: dict[str, IdentityFile] = {}
        # Quiescence needs the coalesced Beats: the node beat and the flag ride there.
        self.quiescence_on = self.options.quiesce and self.options.coalesce_heartbeats
        # This process's start nonce: a peer that sees it change knows we restarted
        # (and lost every in-memory lease and vote of this process's replicas).
        self.nonce = random.getrandbits(63) or 1
        self._rng = random.Random(self.nonce)
        self._ticking: dict[int, RaftGroup] = {}  # groups the tick loop ticks
        self._quiet: dict[int, RaftGroup] = {}  # quiesced groups
        # node liveness, per peer process (node id); its ticks are this loop's
        self._beat_peers: set[int] = set()  # peers owed node beats
        self._beaten: set[int] = set()  # peers sent a Beats since the last node beats
        self._node_beats_due = False  # node beats go at the end of this tick's first flush
        self._liveness: NodeLiveness | None = None  # made at the first group (needs T)
        self._tick_from = 0  # where the next tick's scan of _ticking starts
        self._first_slot = 0.0  # the tick of the newest fresh group's first-election slot
        self._election_ticks = 0  # the smallest of the hosted groups' (0: no group yet)
        self._peer_connected: Callable[[int], bool] | None = getattr(
            transport, "peer_connected", None
        )
        if self.quiescence_on and self._peer_connected is not None:
            transport.on_unreachable = self._on_unreachable

    def identity_file(self, directory: str, cluster_id: str) -> IdentityFile:
        """The IDENTITY file of `directory` (one per directory per host; raises
        IdentityError for another cluster's or another node's directory)."""
        ident = self._identities.get(directory)
        if ident is None:
            ident = IdentityFile(directory, self.node_id, cluster_id)
            self._identities[directory] = ident
        elif cluster_id and cluster_id != ident.cluster_id:
            raise IdentityError(
                f"{directory} belongs to cluster {ident.cluster_id!r}, not {cluster_id!r}"
            )
        return ident

    async def start(self) -> None:
        """Open the data directory, start the disk writer, transport and loops."""
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        if self.data_dir is not None:
            self.env = await asyncio.to_thread(
                LogEnvironment.open, self.data_dir, self.options.storage
            )
        self.writer = DiskWriter(self._loop, name=f"raftlog-disk-{self.node_id}")
        self.transport.register_group(HOST_GROUP_ID, self._on_coalesced)
        await self.transport.start()
        self._tasks = [
            asyncio.create_task(self._ticker(), name=f"raft-host-{self.node_id}-tick"),
            asyncio.create_task(self._housekeeping(), name=f"raft-host-{self.node_id}-hk"),
        ]
        self._started = True

    async def add_group(
        self,
        group_id: int,
        peers: dict[int, str],
        fsm: StateMachine,
        options: NodeOptions | None = None,
        seed: int | None = None,
        join: bool = False,
        compaction_limit: Callable[[], int | None] | None = None,
    ) -> RaftGroup:
        """Create (or reopen, from groups/<group_id>/) a group's replica and start it."""
        group = RaftGroup(
            self,
            group_id,
            peers,
            fsm,
            options=options,
            seed=seed,
            join=join,
            compaction_limit=compaction_limit,
        )
        await self.start_group(group)
        return group

    async def start_group(self, group: RaftGroup) -> None:
        """Start a group built on this host (add_group, or RaftNode's own)."""
        if not self._started or self._closed:
            raise RuntimeError("start the host first (and not after stop)")
        gid = group.group_id
        if gid == HOST_GROUP_ID or not 0 <= gid < HOST_GROUP_ID:
            raise ValueError(f"group id must be in [0, {HOST_GROUP_ID}), got {gid}")
        if gid in self.groups:
            raise ValueError(f"group {gid} is already hosted here")
        if group.options.tick_ms != self.options.tick_ms:
            raise ValueError(
                f"group {gid} ticks every {group.options.tick_ms} ms, the host every "
                f"{self.options.tick_ms} ms"
            )
        self.groups[gid] = group
        try:
            await group._open()
        except BaseException:
            del self.groups[gid]
            await group._close()
            raise
        self._stagger_first_election(group)
        self.transport.register_group(gid, group._on_messages)
        if group.quiesced:
            self._quiet[gid] = group
        else:
            self._ticking[gid] = group
        self._add_beat_peers(group)

    def _stagger_first_election(self, group: RaftGroup) -> None:
        """A fresh group (term 0) elects first on its preferred replica,
        voters[gid mod n] sorted, in the next free slot of campaigns_per_tick
        first elections per tick on this host; the other replicas wait 3T ticks
        beyond that slot (they campaign only if the preferred one could not).
        1,000 groups started together then elect a few per tick without
        competing candidates, each quiesces soon after, and only a few dozen are
        awake (heartbeating every tick) at any time: no storm of split votes on
        a starved box. Their leaders spread over the nodes."""
        if not self.quiescence_on:
            return
        c = group.core
        voters = sorted(c.membership.voters)
        if c.term != 0 or len(voters) < 2 or self.node_id not in voters:
            return
        now = self.stats.ticks
        rate = self.options.campaigns_per_tick or 1_000_000
        self._first_slot = max(self._first_slot, float(now)) + 1.0 / rate
        delay = int(self._first_slot - now)
        t = group.options.election_ticks
        if voters[group.group_id % len(voters)] != self.node_id:
            delay += 3 * t
        c.postpone_election(delay)

    async def remove_group(self, group_id: int, delete: bool = False) -> None:
        """Stop a group; with delete, also remove its storage (groups/<id>/ and
        its index keys), so the id starts empty if it is ever added again."""
        group = self.groups.pop(group_id, None)
        self._ticking.pop(group_id, None)
        self._quiet.pop(group_id, None)
        if group is None:
            if delete:
                await asyncio.to_thread(self._delete_group_storage, group_id)
            return
        self.transport.unregister_group(group_id)
        self._refresh_peers()
        await group._close()
        if delete:
            await asyncio.to_thread(self._delete_group_storage, group_id)

    async def stop(self) -> None:
        """Stop every group, the loops, the transport, the writer and the data directory."""
        if self._closed:
            return
        self._closed = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        # Every step runs even when an earlier one fails (a group whose storage failed
        # may fail to close): a transport left open is torn down by its finalizer on a
        # closed event loop, after the line that said why the node stopped.
        for gid in list(self.groups):
            try:
                await self.remove_group(gid)
            except Exception as exc:
                log.warning("raft.group_close_failed group=%d error=%r", gid, exc)
        if self._started:
            await self.transport.close()
        if self.writer is not None:
            await self.writer.close()
        if self.env is not None:
            await asyncio.to_thread(self.env.close)

    # ------------------------------------------------------------ storage

    def _group_dir(self, group_id: int) -> str:
        if self.env is None:
            raise RuntimeError("this host has no data directory")
        return self.env.group_directory(group_id)

    def _open_group_log(self, group_id: int, options: StorageOptions | None = None) -> LogStore:
        if self.env is None:
            raise RuntimeError("this host has no data directory: give the group a log_dir")
        return self.env.open_log(group_id, options)

    def _delete_group_storage(self, group_id: int) -> None:
        if self.env is None:
            return
        ident = self._identities.get(self.data_dir or "")
        if ident is not None:
            ident.forget_group(group_id)
        self.env.delete_group(group_id)
        shutil.rmtree(self._group_dir(group_id), ignore_errors=True)

    def group_ids_on_disk(self) -> list[int]:
        """Group ids with a directory under groups/ (to reopen after a restart)."""
        if self.data_dir is None:
            return []
        root = os.path.join(self.data_dir, "groups")
        return sorted(int(n) for n in os.listdir(root) if n.isdigit())

    # ------------------------------------------------------------ sending

    def send(self, msgs: Iterable[Message]) -> None:
        """Send a group's messages; heartbeats wait for this loop iteration's flush."""
        if not self.options.coalesce_heartbeats:
            self.transport.send(msgs)
            return
        other: list[Message] = []
        out = self._out
        n = len(out)
        defer = self.options.defer_beat_answers
        k = self.options.beat_ticks
        # Off a beat tick, context-less beats wait for the next one (k > 1 only: with
        # k == 1 every tick is a beat tick).
        hold = k > 1 and self.stats.ticks % k != 0
        for m in msgs:
            if coalescible(m):
                if m.context:
                    out.append(m)  # confirms a read: leaves in this iteration's flush
                elif defer and m.type is MsgType.HEARTBEAT_RESP:
                    self._answers.append(m)  # leaves with the next beat tick's beats
                elif hold:
                    self._held.append(m)
                else:
                    out.append(m)  # merged per peer at the flush, with every other group's
            else:
                other.append(m)
        if other:
            self.transport.send(other)
        if len(out) > n and not self._flush_scheduled:
            # The groups' raft loops woken together run one after another in this
            # loop iteration; the flush runs after them.
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out:
            # send() holds only coalescible messages here, so nothing comes back alone.
            coalesced, _ = coalesce(out, self.node_id, self.nonce)
            st = self.stats
            st.beats_messages_sent += len(coalesced)
            st.beat_rows_sent += len(out)
            beaten = self._beaten
            for m in coalesced:
                beaten.add(m.dst)  # stands in for this tick's node beat to m.dst
            self.transport.send(coalesced)
        if self._node_beats_due:
            # After the tick's beats (inline Readies made theirs before this flush
            # ran): only peers that got none are owed a node beat.
            self._node_beats_due = False
            self._send_node_beats()

    # ---------------------------------------------------------- receiving

    def _on_coalesced(self, msgs: list[Message]) -> None:
        groups = self.groups
        st = self.stats
        for m in msgs:
            if m.type not in COALESCED_KINDS:
                continue  # only coalesced kinds travel under HOST_GROUP_ID
            self._heard_from(m)  # type: ignore[arg-type]
            per_group: dict[int, list[Message]] = {}
            for hb in expand(m):
                st.beat_rows_received += 1
                g = groups.get(hb.group_id)
                # A group still opening (no core yet) or stopping counts as absent,
                # exactly as the transport treats a group not yet registered.
                if g is None or not g._started or g._stopped:
                    st.unknown_group_beats += 1
                    continue
                per_group.setdefault(hb.group_id, []).append(hb)
            for gid, run in per_group.items():
                groups[gid]._on_messages(run)

    # -------------------------------------------------------------- loops

    async def _ticker(self) -> None:
        interval = self.options.tick_ms / 1000
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            behind = loop.time() - next_at
            skipped = 0
            if behind > interval:
                # The loop stalled (CPU starvation, a long GC). Followers do not
                # replay the missed ticks: replayed back to back they would expire
                # every follower's election timer before it reads the leader's beats
                # waiting in its sockets (a storm of elections across all groups);
                # a follower's slower timer only delays an election (and keeps its
                # vote lease longer, the conservative side). Leaders DO replay them,
                # so CheckQuorum still deposes a cut-off leader within an election
                # timeout of wall time (what "a deposed leader cannot serve stale
                # reads" relies on).
                skipped = int(behind / interval)
                self.stats.ticks_skipped += skipped
                next_at += skipped * interval
                # Before leaders replay the missed ticks (CheckQuorum among them), let
                # the loop run what arrived during the stall: the answers waiting there
                # were received in the stalled wall time, and judging without them
                # deposed every awake leader of a starved process at each long stall
                # (at 1,000 groups: an election storm that never settled). A few
                # rounds: transport callbacks first, then the tasks they wake.
                for _ in range(_STALL_DRAIN_ROUNDS):
                    await asyncio.sleep(0)
            self.stats.ticks += 1
            if self.stats.ticks % self.options.beat_ticks == 0 and (self._answers or self._held):
                # A beat tick: the deferred answers (defer_beat_answers) and the held
                # beats leave together with the beats this tick makes.
                self._out.extend(self._held)
                self._out.extend(self._answers)
                self._held = []
                self._answers = []
                if not self._flush_scheduled:
                    self._flush_scheduled = True
                    self._loop.call_soon(self._flush)
            if self.quiescence_on:
                self._node_beats()
            self._tick_groups(skipped)

    def _tick_groups(self, skipped: int) -> None:
        """Tick every group that is not quiesced; at most campaigns_per_tick of
        them may start a campaign (the rest wait: their turn comes first next
        tick, as the scan starts after the last group ticked)."""
        budget = self.options.campaigns_per_tick or -1
        groups = list(self._ticking.values())
        if not groups:
            return
        start = self._tick_from % len(groups)
        deferred = 0
        for k in range(len(groups)):
            g = groups[(start + k) % len(groups)]
            if not g._started or g._stopped or g._fatal is not None:
                continue
            if budget >= 0 and g.core.campaign_due():
                if budget == 0:
                    if not deferred:
                        self._tick_from = start + k  # the first one held back goes first
                    deferred += 1
                    continue
                budget -= 1
            if skipped and g.role is Role.LEADER:
                for _ in range(min(skipped, 2 * g.options.election_ticks)):
                    g.core.tick()
            g._tick()
        self.stats.campaigns_deferred += deferred

    # --------------------------------------------------- quiescence, liveness

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
        if now % (self.options.node_beat_ticks * self.options.beat_ticks) == 0:
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

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(self.options.housekeeping_s)
            now = time.monotonic()
            for g in list(self.groups.values()):
                if g._started and not g._stopped and g._fatal is None:
                    try:
                        g._housekeep(now)
                    except Exception as exc:  # a broken group stops alone
                        g._fail(exc)

    def status(self) -> dict:
        """The host's counters and each group's role/term/commit."""
        w = self.writer.stats if self.writer is not None else None
        return {
            "node": self.node_id,
            "groups": len(self.groups),
            "ticks": self.stats.ticks,
            "ticks_skipped": self.stats.ticks_skipped,
            "beats_messages_sent": self.stats.beats_messages_sent,
            "beat_rows_sent": self.stats.beat_rows_sent,
            "unknown_group_beats": self.stats.unknown_group_beats,
            "quiescence": self.quiescence_on,
            "quiesced_groups": len(self._quiet),
            "node_beats_sent": self.stats.node_beats_sent,
            "peers_down": sorted(self._liveness.down) if self._liveness else [],
            "peers_declared_down": self.stats.peers_declared_down,
            "peer_restarts_seen": self.stats.peer_restarts_seen,
            "liveness_wakes": self.stats.liveness_wakes,
            "peers_seen_broken": self.stats.peers_seen_broken,
            "campaigns_deferred": self.stats.campaigns_deferred,
            "disk_rounds": w.rounds if w else 0,
            "disk_syncs": w.syncs if w else 0,
            "leaders": sum(1 for g in self.groups.values() if g.is_leader()),
            "readies": sum(g.stats.readies for g in self.groups.values()),
            "inline_readies": sum(g.stats.inline_readies for g in self.groups.values()),
            "transport": dataclasses.asdict(self.transport.stats),
        }
