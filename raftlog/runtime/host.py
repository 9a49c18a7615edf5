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

RaftHost is one class in four modules, one part each; the parts hold no state
of their own (every field is set in RaftHost.__init__): the coalesced beats out
and in (host_beats.py: send, the flush, the receiving side), quiescence and
node liveness (host_liveness.py: which groups tick, node beats, peers declared
down or restarted and the wakes they cause) and the loops (host_ticks.py: the
tick loop with its election rate limit and first-election stagger, and
housekeeping). This module keeps the fields, start/stop, adding and removing
groups, the storage of the data directory and status().
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raftlog.core.liveness import NodeLiveness
from raftlog.core.messages import Message
from raftlog.runtime.group import RaftGroup
from raftlog.runtime.host_beats import HostBeats
from raftlog.runtime.host_liveness import HostLiveness
from raftlog.runtime.host_ticks import HostTicks
from raftlog.runtime.options import HostOptions, NodeOptions
from raftlog.runtime.state_machine import StateMachine
from raftlog.storage import DiskWriter, LogEnvironment, LogStore, StorageOptions
from raftlog.storage.identity import IdentityError, IdentityFile
from raftlog.transport.beats import HOST_GROUP_ID

log = logging.getLogger("raftlog.runtime")


@dataclass(slots=True)
class HostStats:
    """Counters of a host; monotonic."""

    ticks: int = 0
    ticks_skipped: int = 0
    """Ticks not run because the loop fell behind by more than one tick."""
    tick_wakes: int = 0
    """Wake-ups of the tick loop (fewer than ticks while the host is idle:
    HostOptions.idle_wakes_on_beat_ticks)."""
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


class RaftHost(HostBeats, HostLiveness, HostTicks):
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
        self.last_tick_at = time.monotonic()
        """When the tick loop last finished a tick (time.monotonic()): a leader's claims
        are only as fresh as its last tick (ticks_current)."""
        self._tick_slack_s = 0.0
        """Seconds the tick loop sleeps beyond one tick on purpose now (an idle host
        wakes on beat ticks only; HostTicks._idle_span)."""
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
        self._node_beat_every = self.options.node_beat_every()  # ticks between node beats
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
        incarnations: dict[int, int] | None = None,
        preferred_leader: int = 0,
    ) -> RaftGroup:
        """Create (or reopen, from groups/<group_id>/) a group's replica and start it
        (incarnations: a sealed start; preferred_leader: who leads a new group;
        both RaftGroup's)."""
        group = RaftGroup(
            self,
            group_id,
            peers,
            fsm,
            options=options,
            seed=seed,
            join=join,
            compaction_limit=compaction_limit,
            incarnations=incarnations,
            preferred_leader=preferred_leader,
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

    def status(self) -> dict:
        """The host's counters and each group's role/term/commit."""
        w = self.writer.stats if self.writer is not None else None
        return {
            "node": self.node_id,
            "groups": len(self.groups),
            "ticks": self.stats.ticks,
            "ticks_skipped": self.stats.ticks_skipped,
            "tick_wakes": self.stats.tick_wakes,
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
            # each round's writes and fsyncs: quantiles, and the counts to difference
            "disk_round_ms": w.round_seconds.summary_ms() if w else {},
            "disk_round_histogram": w.round_seconds.to_json() if w else {},
            "leaders": sum(1 for g in self.groups.values() if g.is_leader()),
            "readies": sum(g.stats.readies for g in self.groups.values()),
            "inline_readies": sum(g.stats.inline_readies for g in self.groups.values()),
            "transport": dataclasses.asdict(self.transport.stats),
        }
