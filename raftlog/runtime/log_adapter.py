"""The core's LogReader over the disk queue (tail + store) and the snapshot files."""

from __future__ import annotations

from raftlog.entry import LogEntry, SnapshotMeta
from raftlog.runtime.snapshots import SnapshotStore
from raftlog.storage import DiskQueue


class QueueLogReader:
    """Reads see entries as soon as they are queued; the core shadows entries
    it has not yet been told are durable, so that is safe (see raft_log.py)."""

    def __init__(self, queue: DiskQueue, snapshots: SnapshotStore) -> None:
        self.queue = queue
        self.snapshots = snapshots
        self._offered: int | None = None  # index of the snapshot snapshot_meta() named last

    def first_index(self) -> int:
        return self.queue.first_index()

    def last_index(self) -> int:
        return self.queue.last_index()

    def term_at(self, index: int) -> int | None:
        return self.queue.term_at(index)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[LogEntry]:
        if lo >= hi:
            return []
        return self.queue.read(lo, hi - lo, max_bytes)

    def config_entries(self) -> list[LogEntry]:
        """The durable CONFIG entries, found through the storage's config index."""
        store = self.queue.store
        return [store.entry(i) for i in store.config_indexes()]

    def snapshot_meta(self) -> SnapshotMeta:
        """The snapshot at first_index() - 1 (the log is only cut at a snapshot, and that
        one is kept): a follower that needs a snapshot gets this one, then every entry
        the log holds after it, so its log ends up as long as the leader's (the sink
        serves Kafka records out of log entries below its newest snapshot). Without one
        (a log compacted before snapshots were kept, or never compacted): the newest,
        as before. chunks come from the snapshot last named here, so a meta and its
        chunks always agree although the first index moves on the disk thread."""
        snaps = self.snapshots
        meta = snaps.meta_at(self.queue.first_index() - 1) or snaps.latest_meta()
        self._offered = meta.index
        return meta

    def snapshot_chunk(self, offset: int, max_bytes: int) -> tuple[bytes, bool]:
        offered = self._offered
        if offered is None or self.snapshots.meta_at(offered) is None:
            offered = self.snapshot_meta().index
        return self.snapshots.chunk(offset, max_bytes, offered)
