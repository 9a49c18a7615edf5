"""LogStore: the durable Raft log (segment files + LMDB index), synchronous.

Threading: one writer at a time (the disk queue's thread) calls the mutating
methods; any thread may read. Readers see an entry only once the writer has
published it, after its bytes are written (and synced, unless write caching).
The in-memory state that readers use (segment table, unindexed locations, the
first/last bounds) changes only under `_lock`; the slow parts of a write
(write, fdatasync, LMDB commit) happen outside it.

Layout of a data directory:
    LOCK                     flock'ed while a process has the log open
    index/                   LMDB environment (see index.py)
    segments/*.seg           segment files (see segments.py)

Recovery is in log_recovery.py, truncations and reset in log_truncate.py, the
hard state, snapshot record and identity stamp in log_meta.py (mixins of
LogStore). Ordering duties on disk:
- append: frames written, then fdatasync; only then is the batch reported
  durable. Index locations follow lazily (checkpoints); recovery rebuilds the
  unindexed tail by scanning from the last checkpoint.
- truncate_suffix: a durable intent in LMDB first, then the files are cut,
  then the intent is durably cleared. A crash in between redoes the cut.
- truncate_prefix: the new first index is durable before files are deleted;
  leftover files below it are deleted on the next open (the disk queue has the
  deletes done on a releaser thread, log_truncate.py).
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raftlog.entry import EntryType, HardState, LogEntry, SnapshotMeta
from raftlog.storage.errors import (
    CorruptLogError,
    DataDirLockedError,
    LogRangeError,
    StorageClosedError,
)
from raftlog.storage.index import (
    Checkpoint,
    IndexEnv,
    Location,
    LogIndex,
    group_prefix,
)
from raftlog.storage.log_meta import MetaMixin
from raftlog.storage.log_recovery import RecoveryMixin
from raftlog.storage.log_truncate import TruncateMixin
from raftlog.storage.options import StorageOptions
from raftlog.storage.repair import Repair, clear_marker, write_marker
from raftlog.storage.segments import (
    FILE_HEADER_SIZE,
    FRAME_HEADER_SIZE,
    Segment,
    encode_frame_header,
)

log = logging.getLogger("raftlog.storage")

_DROP_STEP = 1 << 20
"""The page-cache drop after a sync waits until this many cold bytes gathered: one
fadvise call per MiB, not one per small append."""


@dataclass(slots=True)
class StoreStats:
    """Counters for metrics and benchmarks; monotonic over the store's life."""

    appended_entries: int = 0
    appended_bytes: int = 0
    syncs: int = 0
    index_checkpoints: int = 0
    segments_rolled: int = 0
    recovered_tail_entries: int = 0
    torn_tail_bytes_cut: int = 0


class LogStore(RecoveryMixin, TruncateMixin, MetaMixin):
    """A Raft log on disk. Open with LogStore.open(directory)."""

    def __init__(
        self,
        directory: str,
        options: StorageOptions,
        shared_index: IndexEnv | None = None,
        group_id: int = 0,
    ) -> None:
        self.directory = directory
        self.options = options
        self.group_id = group_id
        self._shared_index = shared_index
        self.stats = StoreStats()
        self._seg_dir = os.path.join(directory, "segments")
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed = False
        self._failed: BaseException | None = None
        self._lock_fd: int | None = None
        self._index: LogIndex
        # segments in index order; _seg_firsts mirrors their first indexes for bisect
        self._segments: list[Segment] = []
        self._seg_firsts: list[int] = []
        self._active: Segment | None = None  # the unsealed last segment, if any
        self._unsynced: list[Segment] = []
        # locations of entries [_pending_base, last] not yet checkpointed into LMDB
        self._pending: list[Location] = []
        self._pending_base = 1
        self._pending_bytes = 0
        # CONFIG entry indexes: those <= the checkpoint are in LMDB, the rest here
        self._pending_configs: list[int] = []
        self._first = 1
        self._prev_term = 0  # term of entry first-1 (the snapshot's), 0 if none
        self._last = 0
        self._last_term = 0
        # _written: last index written to a file (maybe not yet synced);
        # _sync_base: first index written since the last completed fdatasync.
        self._written = 0
        self._sync_base = 1
        self._hard_state = HardState()
        self._snapshot = SnapshotMeta()
        self.repair: Repair | None = None
        """What recovery repaired at open (on_corruption "repair"), None if nothing:
        the runtime then runs this log's group as a replacement (repair.py)."""

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        directory: str,
        options: StorageOptions | None = None,
        *,
        shared_index: IndexEnv | None = None,
        group_id: int = 0,
    ) -> LogStore:
        """Open (or create) the log in directory, recovering from any crash.

        Raises DataDirLockedError if another process has it open, and (with
        options.on_corruption "stop") CorruptLogError naming file and byte offset
        for damage that is not a torn tail; with "repair" the intact prefix is kept
        and `repair` says what was cut. shared_index is for LogEnvironment only: the log's index
        then lives in that environment under group_id's key prefix, and the
        environment (which holds the data directory's lock) guarantees that
        nobody else has this log open, so the log takes no lock of its own.
        """
        store = cls(directory, options or StorageOptions(), shared_index, group_id)
        try:
            store._open()
        except BaseException:
            store._release()
            raise
        return store

    def _open(self) -> None:
        os.makedirs(self._seg_dir, exist_ok=True)
        if self._shared_index is not None:
            self._index = LogIndex(
                "", 0, shared=self._shared_index, prefix=group_prefix(self.group_id)
            )
        else:
            self._lock_directory()
            self._index = LogIndex(
                os.path.join(self.directory, "index"), self.options.lmdb_map_bytes
            )
        self._recover()

    def _lock_directory(self) -> None:
        self._lock_fd = os.open(os.path.join(self.directory, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirLockedError(
                f"data directory {self.directory} is in use by another process"
            ) from None

    # ---------------------------------------------------------------- close

    def close(self) -> None:
        """Checkpoint the index and release the directory. Idempotent."""
        with self._write_lock:
            if self._closed:
                return
            self.wait_released()  # the releaser uses the index: it goes first
            try:
                # After a failed write or fsync nothing unsynced may be synced now and
                # then indexed as if durable: a retried fsync can "succeed" after the
                # kernel dropped the dirty pages (fsyncgate). Recovery decides instead.
                if self._failed is None:
                    self.sync()
                    self._checkpoint()
            finally:
                self._closed = True
                self._release()

    def _release(self) -> None:
        for seg in self._segments:
            seg.close()
        if getattr(self, "_index", None) is not None:
            self._index.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- reads

    def first_index(self) -> int:
        return self._first

    def last_index(self) -> int:
        """Last entry written (durable unless write caching); first_index-1 when empty."""
        return self._last

    def last_term(self) -> int:
        return self._last_term

    def hard_state(self) -> HardState:
        return self._hard_state

    def snapshot_meta(self) -> SnapshotMeta:
        return self._snapshot

    def config_indexes(self) -> list[int]:
        """Indexes of the CONFIG entries in [first_index, last_index], ascending.

        Lets a restarting node rebuild its membership history without reading
        the whole log (only these entries)."""
        with self._lock:
            pending = list(self._pending_configs)
            first, last = self._first, self._last
        stored = self._index.config_indexes()
        return [i for i in stored + pending if first <= i <= last]

    def term_at(self, index: int) -> int | None:
        """Term of entry index; the snapshot term for first_index-1; None outside."""
        with self._lock:
            if index == self._last:
                return self._last_term
            if index == self._first - 1:
                return self._prev_term
            if index < self._first or index > self._last:
                return None
            if index >= self._pending_base:
                return self._pending[index - self._pending_base].term
            loc = self._index.location(index)
        if loc is None:
            exc = CorruptLogError(self._seg_dir, 0, f"index has no location for entry {index}")
            self._found_damage(index, exc)
            raise exc
        return loc.term

    def entry(self, index: int) -> LogEntry:
        entries = self.read(index, 1, 0)
        return entries[0]

    def read(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        """Entries from start: at most max_count, and stop once max_bytes of
        payload are reached (the first entry is always returned).

        LogRangeError if start is outside [first_index, last_index]; CorruptLogError
        if an entry is damaged (the store then refuses further use, see _found_damage).
        """
        try:
            return self._read(start, max_count, max_bytes)
        except CorruptLogError as exc:
            self._found_damage(start, exc)
            raise

    def _found_damage(self, index: int, exc: CorruptLogError) -> None:
        """A read found damage at or after entry `index` while the node runs. Recorded
        durably (the repair marker: entries from `index` on are not trusted), and the
        store refuses further use: the node stops its group, and the restart's
        recovery repairs the log (repair.py). Cutting from the read's first entry
        rather than the damaged one is conservative: more comes from the peers."""
        log.error(
            "storage.damage_found dir=%s entry>=%d: %s; this log refuses further use, a "
            "restart repairs it",
            self.directory,
            index,
            exc,
        )
        try:
            write_marker(self.directory, max(index, 1), str(exc))
            exc.marked = True
        except OSError as err:  # the store still fails; recovery finds the damage again
            log.error("storage.damage_marker_failed dir=%s error=%r", self.directory, err)
        if self._failed is None:
            self._failed = exc

    def clear_repair_marker(self) -> None:
        """The group's new incarnation is durable: forget the repair (repair.py)."""
        clear_marker(self.directory)

    def _read(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        if max_count <= 0:
            return []
        with self._lock:
            self._check_open()
            if start < self._first or start > self._last:
                raise LogRangeError(f"entry {start} is outside [{self._first}, {self._last}]")
            stop = min(self._last + 1, start + (max_count if max_bytes > 0 else 1))
            loc = self._location_locked(start)
            k = bisect.bisect_left(self._seg_firsts, loc[0])
            if k == len(self._seg_firsts) or self._seg_firsts[k] != loc[0]:
                raise CorruptLogError(self._seg_dir, 0, f"no segment file starts at entry {loc[0]}")
            if stop == start + 1:  # the common random read: one pread, one frame
                return self._segments[k].read_one(loc[1], loc[2], start)
            # Walk frames from the first entry's position, segment after segment;
            # at least one entry even when max_bytes is 0.
            hint = loc[2]
            out, pos, used = self._segments[k].read_entries(
                loc[1], start, stop, max(max_bytes, 1), hint
            )
            index = start + len(out)
            while index < stop and used < max_bytes and k + 1 < len(self._segments):
                k += 1
                seg = self._segments[k]
                if seg.first_index != index:
                    raise CorruptLogError(
                        seg.path, 0, f"segment starts at {seg.first_index}, expected {index}"
                    )
                more, pos, got = seg.read_entries(
                    FILE_HEADER_SIZE, index, stop, max_bytes - used, hint
                )
                out.extend(more)
                used += got
                index += len(more)
            if index < stop and used < max_bytes:
                raise CorruptLogError(
                    self._segments[k].path, pos, f"entry {index} is missing from the segments"
                )
            return out

    def _location_locked(self, index: int) -> tuple[int, int, int, int]:
        if index >= self._pending_base:
            return self._pending[index - self._pending_base]
        loc = self._index.location(index)
        if loc is None:
            raise CorruptLogError(self._seg_dir, 0, f"index has no location for entry {index}")
        return loc

    def _segment_for(self, first_index: int) -> Segment:
        k = bisect.bisect_left(self._seg_firsts, first_index)
        if k == len(self._seg_firsts) or self._seg_firsts[k] != first_index:
            raise CorruptLogError(
                self._seg_dir, 0, f"no segment file starts at entry {first_index}"
            )
        return self._segments[k]

    def _check_open(self) -> None:
        if self._failed is not None:
            raise StorageClosedError(
                f"log store {self.directory} failed earlier and refuses further use: {self._failed!r}"
            ) from self._failed
        if self._closed:
            raise StorageClosedError(f"log store {self.directory} is closed")

    def _guard(self, op: Callable[..., None], *args: object) -> None:
        """Run a write; any error leaves disk and memory possibly out of step,
        so the store refuses all further use (the node must restart and recover)."""
        try:
            op(*args)
        except BaseException as exc:
            self._failed = exc
            log.error("storage.failed dir=%s error=%r", self.directory, exc)
            raise

    # --------------------------------------------------------------- writes

    def append(self, entries: Sequence[LogEntry], sync: bool = True) -> None:
        """Append entries (dense, following last_index, terms not decreasing).

        Returns once they are written and, with sync=True, fdatasync'ed. Raises
        ValueError for entries that do not continue the log.
        """
        if not entries:
            return
        with self._write_lock:
            self._check_open()
            self._validate_append(entries)
            self._guard(self._append_locked, entries, sync)

    def _append_locked(self, entries: Sequence[LogEntry], sync: bool) -> None:
        opts = self.options
        bufs: list[bytes] = []
        nbytes = 0
        new_locs: list[Location] = []
        # CONFIG indexes of entries placed but not yet published; a roll
        # publishes (and checkpoints) the ones placed before it, with them.
        configs: list[int] = []
        seg = self._active
        for e in entries:
            flen = FRAME_HEADER_SIZE + len(e.data)
            if seg is None or (
                seg.end + nbytes + flen > opts.segment_bytes
                and (seg.last_index >= seg.first_index or nbytes > 0)
            ):
                if seg is not None and nbytes:
                    seg.write(bufs, nbytes)
                    bufs, nbytes = [], 0
                seg = self._roll(e.index, new_locs, configs)
            if e.type is EntryType.CONFIG:
                configs.append(e.index)
            new_locs.append(Location(seg.first_index, seg.end + nbytes, flen, e.term))
            bufs.append(encode_frame_header(e, self._sync_base))
            bufs.append(e.data)
            nbytes += flen
            seg.last_index, seg.last_term = e.index, e.term
        if nbytes:
            seg.write(bufs, nbytes)
            if seg not in self._unsynced:
                self._unsynced.append(seg)
        self._written = entries[-1].index
        if sync:
            self.sync()
        with self._lock:
            self._pending.extend(new_locs)
            self._pending_bytes += sum(loc.length for loc in new_locs)
            if configs:
                self._pending_configs.extend(configs)
            self._last = entries[-1].index
            self._last_term = entries[-1].term
        self.stats.appended_entries += len(entries)
        self.stats.appended_bytes += sum(len(e.data) for e in entries)
        if (
            self._pending_bytes >= opts.index_checkpoint_bytes
            or len(self._pending) >= opts.index_checkpoint_entries
        ):
            self._checkpoint()

    def _validate_append(self, entries: Sequence[LogEntry]) -> None:
        expect, term = self._last + 1, self._last_term
        for e in entries:
            if e.index != expect:
                raise ValueError(f"append: entry {e.index} does not follow {expect - 1}")
            if e.term < term:
                raise ValueError(f"append: term {e.term} of entry {e.index} is below {term}")
            if len(e.data) > self.options.max_entry_bytes:
                raise ValueError(
                    f"append: entry {e.index} has {len(e.data)} bytes, over max_entry_bytes "
                    f"{self.options.max_entry_bytes}"
                )
            expect, term = expect + 1, e.term

    def _roll(self, first_index: int, new_locs: list[Location], configs: list[int]) -> Segment:
        """Seal the active segment (if any) and start a new one at first_index.

        The sealed segment's data is synced and its locations checkpointed in
        the same LMDB transaction that records the seal, so the index never
        refers to unsynced bytes of a sealed file.
        """
        old = self._active
        if old is not None:
            # Sealing syncs the old file, so every frame of the new one has a
            # sync base inside the new file (see segments.py on torn tails).
            self._written = old.last_index
            if old not in self._unsynced:
                self._unsynced.append(old)
            self.sync()
            # The entries of this batch already placed in `old` must be
            # indexed together with the seal.
            placed = [loc for loc in new_locs if loc.segment == old.first_index]
            with self._lock:
                self._pending.extend(placed)
                self._pending_configs.extend(configs)
                self._last = old.last_index
                self._last_term = old.last_term
            del new_locs[: len(placed)]
            configs.clear()
            self._checkpoint(seal=old)
            if self.options.page_cache_drop:
                old.drop_cached(old.end)
            with self._lock:  # readers pread through the descriptor seal() closes
                old.seal()
        seg = Segment.create(self._seg_dir, first_index)
        with self._lock:
            self._segments.append(seg)
            self._seg_firsts.append(first_index)
            self._active = seg
        self.stats.segments_rolled += 1
        return seg

    def sync(self) -> None:
        """fdatasync every segment written since the last sync. A failure fails the
        store for good, whoever called (the write-caching flush too): an fsync error is
        never retried as if the data were durable (fsyncgate)."""
        try:
            for seg in self._unsynced:
                seg.sync()
                self.stats.syncs += 1
        except BaseException as exc:
            self._failed = self._failed or exc
            raise
        keep = self.options.page_cache_keep_bytes
        if self.options.page_cache_drop:
            for seg in self._unsynced:
                if seg.end - keep - seg.uncached_below >= _DROP_STEP:
                    seg.drop_cached(seg.end - keep)
        self._unsynced.clear()
        self._sync_base = self._written + 1

    def _checkpoint(self, seal: Segment | None = None) -> None:
        """Move the unindexed locations into LMDB (one transaction, not forced durable)."""
        with self._lock:
            pending = list(self._pending)
            base = self._pending_base
            configs = [i for i in self._pending_configs if i < base + len(pending)]
        if not pending and seal is None:
            return
        last = base + len(pending) - 1
        with self._index.writer(durable=False) as w:
            if pending:
                w.put_locations(base, pending)
                tail = pending[-1]
                w.set_checkpoint(
                    Checkpoint(last, tail.term, tail.segment, tail.position + tail.length)
                )
            if seal is not None:
                w.seal_segment(seal.first_index, seal.last_index, seal.end)
            if configs:
                w.put_configs(configs)
        with self._lock:
            self._pending_configs = self._pending_configs[len(configs) :]
            del self._pending[: len(pending)]
            self._pending_base = base + len(pending)
            self._pending_bytes = sum(loc.length for loc in self._pending)
        self.stats.index_checkpoints += 1
