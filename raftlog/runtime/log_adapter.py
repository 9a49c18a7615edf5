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
        return self.snapshots.latest_meta()

    def snapshot_chunk(self, offset: int, max_bytes: int) -> tuple[bytes, bool]:
        return self.snapshots.chunk(offset, max_bytes)
