"""Log compaction of one group: when it snapshots its applied state, which snapshots
it keeps, and where it cuts its log.

RaftGroup asks `due` after every applied batch and `take`s a snapshot (also on
demand, snapshot_now); the snapshot is then stored by a task of the group (`store`):
written, recorded, and the log cut behind it. A leader's snapshot installed on
this node goes through the Ready pipeline instead (RaftGroup._persist_snapshot).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from raftlog import core
from raftlog.core.log_reader import Snapshot
from raftlog.runtime.options import NodeOptions
from raftlog.runtime.snapshots import SnapshotStore
from raftlog.runtime.state_machine import StateMachine
from raftlog.storage import DiskQueue

log = logging.getLogger("raftlog.runtime")


KEEP_CUT_POINTS = 16
"""Snapshots kept between the base (first_index - 1) and the newest: the points the log
can be cut at next. With the compaction limit W entries behind the newest snapshot, the
log holds about W * (1 + 1 / KEEP_CUT_POINTS) plus one snapshot period. 16, not 4 (until
session 15): with 4 the data directory was a sawtooth of a quarter of the retained
volume (250-400 MB a tooth for 940 MB retained in the 30-minute soak, docs/storage.md),
which is both disk held for nothing and a sawtooth no growth measurement sees through.
A kept snapshot costs its file (the sink's: 150-250 KB), so 16 of them are a few MB."""


def cut_points(indexes: list[int], base: int, most: int) -> set[int]:
    """The snapshot indexes to keep: base (if held), the newest, and at most `most` in
    between, dropping first the one whose neighbours are closest (so the kept ones stay
    evenly spread). Everything below base goes: the log no longer reaches it."""
    if not indexes:
        return set()
    newest = max(indexes)
    between = sorted(i for i in indexes if base < i < newest)
    while len(between) > most:
        points = [base, *between, newest]
        k = min(range(1, len(points) - 1), key=lambda j: points[j + 1] - points[j - 1])
        del between[k - 1]
    return {i for i in (base, newest, *between) if i in indexes}


class Compaction:
    """One group's snapshot taking and storing, on the group's event loop.

    compaction_limit() -> highest log index the application allows to be compacted
    away (None: no limit); retention policies live there."""

    def __init__(
        self,
        node_id: int,
        options: NodeOptions,
        compaction_limit: Callable[[], int | None] | None,
    ) -> None:
        self.node_id = node_id
        self.options = options
        self._compaction_limit = compaction_limit
        self.last_index = 0
        """Index of the newest snapshot this group holds: taken here, installed from a
        leader or loaded at start (the group sets it for the last two)."""
        self.released = 0
        """Highest index the application released to compaction at a snapshot (this
        process): RaftGroup.first_index() follows it, not the cut."""
        self._lock = asyncio.Lock()

    @property
    def storing(self) -> bool:
        """A snapshot is being stored (written, or the log cut behind it) now."""
        return self._lock.locked()

    def due(self, applied: int) -> bool:
        """snapshot_every_entries were applied since the newest snapshot (never when 0)."""
        every = self.options.snapshot_every_entries
        return bool(every) and applied - self.last_index >= every

    def take(self, raw: core.RawNode, fsm: StateMachine, applied: int) -> Snapshot | None:
        """A snapshot of the state at `applied`, the log compacted in the core to it;
        None when it cannot be taken yet (the next applied batch retries)."""
        # Applying may run ahead of this node's own fsync (committed entries
        # are on a quorum), but a snapshot may only cover entries the core
        # knows are durable here: wait for the persist loop to catch up.
        if applied > raw.log.stable_last():
            return None
        data = fsm.on_snapshot_save()
        try:
            snap = raw.compact(applied, data)
        except ValueError as exc:  # not compactable yet: the next apply retries
            log.info("raft.snapshot_deferred node=%d reason=%s", self.node_id, exc)
            return None
        self.last_index = snap.meta.index
        return snap

    async def store(self, snap: Snapshot, snapshots: SnapshotStore, queue: DiskQueue) -> None:
        """Store a snapshot, then cut the log prefix at the newest kept snapshot that
        neither snapshot_keep_entries nor the application's compaction limit forbids.

        Invariant: after a cut at X, the snapshot at X (= first_index - 1) is kept (it is
        what a follower needing a snapshot is sent, log_adapter.py), so a follower rebuilt
        by InstallSnapshot gets every entry the leader still holds. Cutting at the limit
        itself, below the newest snapshot, left such a follower without the entries
        between the limit and the snapshot: a wiped sink node never held the Kafka
        records there (chaos: "final read incomplete"). Snapshots between the base and
        the newest are the later cut points, thinned to KEEP_CUT_POINTS."""
        # One at a time: the cut and the choice of snapshots to keep read the first
        # index, which another store's cut (on the disk thread) would move under them.
        async with self._lock:
            await self._store_locked(snap, snapshots, queue)

    async def _store_locked(
        self, snap: Snapshot, snapshots: SnapshotStore, queue: DiskQueue
    ) -> None:
        await asyncio.to_thread(snapshots.save, snap)
        await queue.save_snapshot_meta(snap.meta)
        upto = snap.meta.index - self.options.snapshot_keep_entries
        if self._compaction_limit is not None:
            limit = self._compaction_limit()
            if limit is not None:
                upto = min(upto, limit)
        self.released = max(self.released, min(upto, snap.meta.index))
        cut = max((i for i in snapshots.indexes() if i <= upto), default=0)
        if cut >= queue.first_index():
            await queue.truncate_prefix(cut)
        base = queue.first_index() - 1
        keep = cut_points(snapshots.indexes(), base, KEEP_CUT_POINTS)
        doomed = snapshots.forget(keep)  # on the loop: no chunk is being read
        if doomed:
            await asyncio.to_thread(snapshots.delete_files, doomed)
