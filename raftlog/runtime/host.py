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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from raftlog.core import Role
from raftlog.core.messages import Message, MsgType
from raftlog.runtime.group import RaftGroup
from raftlog.runtime.options import HostOptions, NodeOptions
from raftlog.runtime.state_machine import StateMachine
from raftlog.storage import DiskWriter, LogEnvironment, LogStore, StorageOptions
from raftlog.storage.identity import IdentityError, IdentityFile
from raftlog.transport.beats import COALESCED_KINDS, HOST_GROUP_ID, coalesce, expand

log = logging.getLogger("raftlog.runtime")

_BEAT_KINDS = frozenset({MsgType.HEARTBEAT, MsgType.HEARTBEAT_RESP})


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
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._identities: dict[str, IdentityFile] = {}

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
        self.transport.register_group(gid, group._on_messages)

    async def remove_group(self, group_id: int, delete: bool = False) -> None:
        """Stop a group; with delete, also remove its storage (groups/<id>/ and
        its index keys), so the id starts empty if it is ever added again."""
        group = self.groups.pop(group_id, None)
        if group is None:
            if delete:
                await asyncio.to_thread(self._delete_group_storage, group_id)
            return
        self.transport.unregister_group(group_id)
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
        for m in msgs:
            if m.type in _BEAT_KINDS:
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
        if not out:
            return
        coalesced, _ = coalesce(out, self.node_id)
        st = self.stats
        st.beats_messages_sent += len(coalesced)
        st.beat_rows_sent += len(out)
        self.transport.send(coalesced)

    # ---------------------------------------------------------- receiving

    def _on_coalesced(self, msgs: list[Message]) -> None:
        groups = self.groups
        st = self.stats
        for m in msgs:
            if m.type not in COALESCED_KINDS:
                continue  # only coalesced kinds travel under HOST_GROUP_ID
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
            self.stats.ticks += 1
            for g in list(self.groups.values()):
                if g._started and not g._stopped and g._fatal is None:
                    if skipped and g.role is Role.LEADER:
                        for _ in range(min(skipped, 2 * g.options.election_ticks)):
                            g.core.tick()
                    g._tick()

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
            "disk_rounds": w.rounds if w else 0,
            "disk_syncs": w.syncs if w else 0,
            "leaders": sum(1 for g in self.groups.values() if g.is_leader()),
        }
