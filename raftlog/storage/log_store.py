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

Ordering duties on disk:
- append: frames written, then fdatasync; only then is the batch reported
  durable. Index locations follow lazily (checkpoints); recovery rebuilds the
  unindexed tail by scanning from the last checkpoint.
- truncate_suffix: a durable intent in LMDB first, then the files are cut,
  then the intent is durably cleared. A crash in between redoes the cut.
- truncate_prefix: the new first index is durable before files are deleted;
  leftover files below it are deleted on the next open.
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
    TruncateIntent,
    group_prefix,
)
from raftlog.storage.options import StorageOptions
from raftlog.storage.segments import (
    FILE_HEADER_SIZE,
    FRAME_HEADER_SIZE,
    Segment,
    encode_frame_header,
    fsync_dir,
    parse_segment_name,
)

log = logging.getLogger("raftlog.storage")


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


class LogStore:
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

        Raises DataDirLockedError if another process has it open, and
        CorruptLogError (naming file and byte offset) for damage that is not a
        torn tail. shared_index is for LogEnvironment only: the log's index
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

    def _recover(self) -> None:
        self._hard_state = self._index.hard_state()
        self._snapshot = self._index.snapshot()
        first = self._index.first_index()
        if first is not None:
            self._first, self._prev_term = first
        intent = self._index.truncate_intent()
        if intent is not None:
            log.warning(
                "storage.recover redo_truncate from_index=%d segment=%d position=%d",
                *intent,
            )
            self._cut_files(intent)
            with self._index.writer(durable=True) as w:
                w.set_truncate_intent(None)
        self._recover_segments()

    def _segment_files(self) -> list[int]:
        firsts = []
        for name in os.listdir(self._seg_dir):
            first = parse_segment_name(name)
            if first is not None:
                firsts.append(first)
        return sorted(firsts)

    def _recover_segments(self) -> None:
        on_disk = self._segment_files()
        sealed = self._index.sealed_segments()
        checkpoint = self._index.checkpoint()

        # Sealed segments wholly below the first index are leftovers of a prefix truncation.
        for first, info in sorted(sealed.items()):
            if info.last_index < self._first:
                self._delete_file(first)
                with self._index.writer(durable=False) as w:
                    w.forget_segment(first)
                del sealed[first]
                if first in on_disk:
                    on_disk.remove(first)

        for first, info in sorted(sealed.items()):
            if first not in on_disk:
                raise CorruptLogError(
                    os.path.join(self._seg_dir, f"{first:020d}.seg"),
                    0,
                    "sealed segment file is missing",
                )
            seg = Segment(self._seg_dir, first)
            seg.read_header()
            if seg.file_size() < info.end:
                raise CorruptLogError(
                    seg.path, seg.file_size(), f"file is shorter than its indexed end {info.end}"
                )
            seg.end, seg.last_index = info.end, info.last_index
            self._segments.append(seg)

        # Everything after the checkpoint is rebuilt by scanning: the rest of the
        # checkpoint's segment, then every later (unsealed) file.
        if checkpoint is not None:
            expect, prev_term = checkpoint.last_index + 1, checkpoint.last_term
            self._pending_base = expect
            if checkpoint.segment not in sealed:
                if checkpoint.segment not in on_disk:
                    raise CorruptLogError(
                        os.path.join(self._seg_dir, f"{checkpoint.segment:020d}.seg"),
                        0,
                        "segment file named by the index checkpoint is missing",
                    )
                seg = Segment(self._seg_dir, checkpoint.segment)
                seg.read_header()
                if seg.file_size() < checkpoint.end:
                    raise CorruptLogError(
                        seg.path,
                        seg.file_size(),
                        f"file is shorter than its checkpointed end {checkpoint.end}",
                    )
                seg.end, seg.last_index = checkpoint.end, checkpoint.last_index
                seg.last_term = checkpoint.last_term
                self._segments.append(seg)
            to_scan = [f for f in on_disk if f > checkpoint.segment]
            tail_seg = self._segments[-1] if self._segments else None
        else:
            sealed_last = self._segments[-1] if self._segments else None
            expect = (
                sealed_last.last_index + 1
                if sealed_last
                else (on_disk[0] if on_disk else self._first)
            )
            prev_term = self._prev_term
            self._pending_base = expect
            to_scan = [f for f in on_disk if f not in sealed]
            tail_seg = None

        # Scan the rest of the checkpoint's segment (unless it is sealed: then
        # its end is final), then each later file in order.
        plan: list[tuple[Segment, int, bool]] = []
        if tail_seg is not None and checkpoint is not None and checkpoint.segment not in sealed:
            plan.append((tail_seg, tail_seg.end, False))
        for first in to_scan:
            plan.append((Segment(self._seg_dir, first), FILE_HEADER_SIZE, True))

        max_frame = self.options.max_entry_bytes
        for i, (seg, start, is_new) in enumerate(plan):
            later = [p[0] for p in plan[i + 1 :]]
            if is_new:
                header_ok = self._check_new_file(seg, expect, later)
                if not header_ok:
                    break
            frames, stop = seg.scan(start, expect, prev_term, max_frame)
            for fr in frames:
                self._pending.append(Location(seg.first_index, fr.position, fr.length, fr.term))
                self._pending_bytes += fr.length
                if fr.etype == EntryType.CONFIG:
                    self._pending_configs.append(fr.index)
            if frames:
                expect = frames[-1].index + 1
                prev_term = frames[-1].term
                seg.last_index, seg.last_term = frames[-1].index, frames[-1].term
                seg.end = frames[-1].position + frames[-1].length
            elif is_new:
                seg.end = FILE_HEADER_SIZE
            if is_new:
                self._segments.append(seg)
            self.stats.recovered_tail_entries += len(frames)
            if stop is not None:
                self._cut_torn_tail(seg, stop.position, stop.reason, expect, later)
                break
        self._last, self._last_term = expect - 1, prev_term
        if self._last < self._first - 1:
            raise CorruptLogError(
                self._seg_dir, 0, f"log ends at {self._last} but the first index is {self._first}"
            )
        self._seg_firsts = [s.first_index for s in self._segments]
        # What the scan accepted may exist only in the page cache (a process
        # killed between write and fdatasync): make it durable before anyone
        # relies on it.
        for seg, _start, _new in plan:
            if seg in self._segments:
                fd = os.open(seg.path, os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
        self._written = self._last
        self._sync_base = self._last + 1
        if self._segments and self._segments[-1].first_index not in sealed:
            self._active = self._segments[-1]
            self._active.open_for_append()
        log.info(
            "storage.open dir=%s first=%d last=%d segments=%d scanned_tail_entries=%d",
            self.directory,
            self._first,
            self._last,
            len(self._segments),
            self.stats.recovered_tail_entries,
        )

    def _check_new_file(self, seg: Segment, expect: int, later: list[Segment]) -> bool:
        """Checks an unsealed file found after the checkpoint; False if it was a torn creation."""
        if seg.first_index != expect:
            raise CorruptLogError(
                seg.path,
                0,
                f"segment should start at entry {expect}, its name says {seg.first_index}",
            )
        try:
            seg.read_header()
        except CorruptLogError:
            if later or seg.file_size() > FILE_HEADER_SIZE:
                raise
            # Crash while creating the file: it never held an entry.
            log.warning("storage.recover remove_torn_segment path=%s", seg.path)
            os.unlink(seg.path)
            fsync_dir(self._seg_dir)
            return False
        return True

    def _cut_torn_tail(
        self, seg: Segment, position: int, reason: str, expect: int, later: list[Segment]
    ) -> None:
        """A scan stopped at position (entry `expect`): cut it if it is a torn
        tail, raise CorruptLogError if a sync completed after it was written."""
        max_frame = self.options.max_entry_bytes
        found = seg.highest_sync_base_after(position, max_frame)
        for other in later:
            other_found = other.highest_sync_base_after(FILE_HEADER_SIZE - 1, max_frame)
            if other_found is not None:
                raise CorruptLogError(
                    seg.path, position, f"{reason}; a later segment {other.path} holds valid data"
                )
        if found is not None and found[0] > expect:
            raise CorruptLogError(
                seg.path,
                position,
                f"{reason}; entry {expect} was synced (a valid frame written after a later "
                f"sync follows at byte {found[1]})",
            )
        size = seg.file_size()
        log.warning(
            "storage.recover cut_torn_tail path=%s position=%d bytes=%d entry=%d reason=%r",
            seg.path,
            position,
            size - position,
            expect,
            reason,
        )
        self.stats.torn_tail_bytes_cut += size - position
        seg.truncate(position)
        for other in later:
            log.warning("storage.recover remove_empty_segment path=%s", other.path)
            os.unlink(other.path)
        if later:
            fsync_dir(self._seg_dir)

    # ---------------------------------------------------------------- close

    def close(self) -> None:
        """Checkpoint the index and release the directory. Idempotent."""
        with self._write_lock:
            if self._closed:
                return
            try:
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
            raise CorruptLogError(self._seg_dir, 0, f"index has no location for entry {index}")
        return loc.term

    def entry(self, index: int) -> LogEntry:
        entries = self.read(index, 1, 0)
        return entries[0]

    def read(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        """Entries from start: at most max_count, and stop once max_bytes of
        payload are reached (the first entry is always returned).

        LogRangeError if start is outside [first_index, last_index].
        """
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
            )
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
            old.seal()
        seg = Segment.create(self._seg_dir, first_index)
        with self._lock:
            self._segments.append(seg)
            self._seg_firsts.append(first_index)
            self._active = seg
        self.stats.segments_rolled += 1
        return seg

    def sync(self) -> None:
        """fdatasync every segment written since the last sync."""
        for seg in self._unsynced:
            seg.sync()
            self.stats.syncs += 1
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

    def truncate_suffix(self, from_index: int) -> None:
        """Remove every entry >= from_index; durable on return.

        Raises LogRangeError if from_index <= first_index - 1 would cut into the
        snapshot (from_index < first_index). A no-op if from_index > last_index.
        """
        with self._write_lock:
            self._check_open()
            self._guard(self._truncate_suffix_locked, from_index)

    def _truncate_suffix_locked(self, from_index: int) -> None:
        if from_index > self._last:
            return
        if from_index < self._first:
            raise LogRangeError(
                f"truncate_suffix({from_index}) would remove entries below first index {self._first}"
            )
        self.sync()
        loc = self._location(from_index)
        keep_term = self.term_at(from_index - 1) or 0
        intent = TruncateIntent(from_index, loc.segment, loc.position)
        with self._lock:
            k = bisect.bisect_left(self._seg_firsts, loc.segment)
            whole = loc.position == FILE_HEADER_SIZE
            doomed = self._segments[k + 1 :] + ([self._segments[k]] if whole else [])
            for seg in doomed:
                seg.close()
            self._segments = self._segments[: k if whole else k + 1]
            self._seg_firsts = [s.first_index for s in self._segments]
            self._pending_configs = [i for i in self._pending_configs if i < from_index]
            if from_index >= self._pending_base:
                del self._pending[from_index - self._pending_base :]
            else:
                self._pending.clear()
                self._pending_base = from_index
            self._pending_bytes = sum(p.length for p in self._pending)
            self._last, self._last_term = from_index - 1, keep_term
            self._active = None if whole else self._segments[k]
        # Everything left is synced (sync() above; the cut is fsync'ed below).
        self._written, self._sync_base = from_index - 1, from_index
        prev = self._segments[-1] if self._segments else None
        with self._index.writer(durable=True) as w:
            w.set_truncate_intent(intent)
            w.delete_from(from_index)
            for seg in doomed:
                w.forget_segment(seg.first_index)
            if self._active is not None:
                w.forget_segment(self._active.first_index)  # unsealed again
            if not self._pending:
                # Every entry before the cut is indexed: the checkpoint moves back
                # to the cut. Otherwise the old checkpoint lies before it and stays.
                if prev is None:
                    w.set_checkpoint(None)
                else:
                    end = prev.end if whole else loc.position
                    w.set_checkpoint(Checkpoint(from_index - 1, keep_term, prev.first_index, end))
        self._cut_files(intent)
        if self._active is not None:
            self._active.end = loc.position
            self._active.last_index, self._active.last_term = from_index - 1, keep_term
            self._active.open_for_append()
        with self._index.writer(durable=True) as w:
            w.set_truncate_intent(None)

    def _location(self, index: int) -> Location:
        with self._lock:
            return Location._make(self._location_locked(index))

    def _cut_files(self, intent: TruncateIntent) -> None:
        """Apply a truncation intent to the files; idempotent (recovery redoes it)."""
        removed = False
        for first in self._segment_files():
            if first > intent.segment:
                self._delete_file(first, sync_dir=False)
                removed = True
        path = os.path.join(self._seg_dir, f"{intent.segment:020d}.seg")
        if os.path.exists(path):
            if intent.position <= FILE_HEADER_SIZE:
                self._delete_file(intent.segment, sync_dir=False)
                removed = True
            elif os.path.getsize(path) > intent.position:
                Segment(self._seg_dir, intent.segment).truncate(intent.position)
        if removed:
            fsync_dir(self._seg_dir)

    def _delete_file(self, first: int, sync_dir: bool = True) -> None:
        path = os.path.join(self._seg_dir, f"{first:020d}.seg")
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        if sync_dir:
            fsync_dir(self._seg_dir)

    def truncate_prefix(self, upto: int) -> None:
        """Forget entries <= upto (they are in a snapshot); durable on return.

        Whole segment files below the new first index are deleted; the segment
        holding it stays (its leading entries become unreachable).
        """
        with self._write_lock:
            self._check_open()
            self._guard(self._truncate_prefix_locked, upto)

    def _truncate_prefix_locked(self, upto: int) -> None:
        if upto < self._first:
            return
        if upto > self._last:
            raise LogRangeError(
                f"truncate_prefix({upto}) is past the last entry {self._last}; use reset()"
            )
        self._checkpoint()
        term = self.term_at(upto) or 0
        with self._lock:
            doomed = [s for s in self._segments if s.last_index <= upto and s is not self._active]
            for seg in doomed:
                seg.close()
            self._segments = [s for s in self._segments if s not in doomed]
            self._seg_firsts = [s.first_index for s in self._segments]
            self._first, self._prev_term = upto + 1, term
        with self._index.writer(durable=True) as w:
            w.set_first_index(upto + 1, term)
            for seg in doomed:
                w.forget_segment(seg.first_index)
        for seg in doomed:
            self._delete_file(seg.first_index, sync_dir=False)
        if doomed:
            fsync_dir(self._seg_dir)
        self._delete_index_below(upto + 1)

    def _delete_index_below(self, index: int) -> None:
        with self._index.writer(durable=False) as w:
            w.delete_below(index)

    def reset(self, next_index: int, snapshot: SnapshotMeta) -> None:
        """Drop the whole log; the next append must be next_index. Durable on return.

        For a follower installing a snapshot that its log does not match. The
        files go first (through a durable truncation intent), then the new
        first index is recorded: a crash in between leaves an empty log at the
        old first index, never old entries under the new one.
        """
        if snapshot.index != next_index - 1:
            raise ValueError("reset: snapshot.index must be next_index - 1")
        with self._write_lock:
            self._check_open()
            self._guard(self._reset_locked, next_index, snapshot)

    def _reset_locked(self, next_index: int, snapshot: SnapshotMeta) -> None:
        if self._last >= self._first:
            self._truncate_suffix_locked(self._first)
        with self._lock:
            for seg in self._segments:
                seg.close()
            self._segments, self._seg_firsts, self._active = [], [], None
        for first in self._segment_files():
            self._delete_file(first, sync_dir=False)
        fsync_dir(self._seg_dir)
        sealed = list(self._index.sealed_segments())
        with self._index.writer(durable=True) as w:
            w.set_first_index(next_index, snapshot.term)
            w.set_snapshot(snapshot)
            w.set_checkpoint(None)
            w.delete_from(0)
            for first in sealed:
                w.forget_segment(first)
        with self._lock:
            self._first, self._prev_term = next_index, snapshot.term
            self._last, self._last_term = next_index - 1, snapshot.term
            self._written, self._sync_base = next_index - 1, next_index
            self._pending.clear()
            self._pending_configs.clear()
            self._pending_base = next_index
            self._pending_bytes = 0
            self._snapshot = snapshot

    def save_hard_state(self, hs: HardState, durable: bool = True) -> None:
        """Persist term, vote and commit checkpoint atomically; durable on return
        unless durable=False (a commit-only checkpoint: a crash may undo it)."""
        with self._write_lock:
            self._check_open()
            self._guard(self._write_meta, "hard_state", hs, durable)
            self._hard_state = hs

    def save_snapshot_meta(self, meta: SnapshotMeta) -> None:
        """Record the latest snapshot's last index/term and data; durable on return."""
        with self._write_lock:
            self._check_open()
            self._guard(self._write_meta, "snapshot", meta)
            self._snapshot = meta

    def _write_meta(self, what: str, value: HardState | SnapshotMeta, durable: bool = True) -> None:
        with self._index.writer(durable=durable) as w:
            if what == "hard_state":
                w.set_hard_state(value)  # type: ignore[arg-type]
            else:
                w.set_snapshot(value)  # type: ignore[arg-type]
