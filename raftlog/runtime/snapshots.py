"""Snapshot files: one file per snapshot, written atomically, CRC-checked.

    snapshots/snapshot-<index:020d>-<term>.snap
      header: magic b"RSSNAP01", index u64, term u64, meta length u32,
              data length u64, CRC-32C u32 of (meta + data)
      meta bytes (membership), data bytes (the application's state)

Written to a temporary name, fsync'ed, renamed, directory fsync'ed: a crash
leaves either the old snapshot or the new one, never half of one.

A group keeps a few snapshots, not one (compaction.py decides which, see
`Compaction.store`):
  - the newest: a restart loads it, so it replays only the entries after it;
  - the *base*, at the log's first_index - 1: the one a follower that needs a
    snapshot is sent (`QueueLogReader`), so that the follower then receives every
    entry the leader's log still holds, by AppendEntries. The application may keep
    entries below its newest snapshot (a compaction limit: the sink serves Kafka
    records out of the log); a follower given the newest snapshot instead would
    never hold those entries;
  - a few in between: the log is only ever cut at a snapshot, so these are the
    points it can be cut at when the application's limit moves past them.
"""

from __future__ import annotations

import contextlib
import os
import struct

import crc32c

from raftlog.core.log_reader import Snapshot
from raftlog.entry import SnapshotMeta
from raftlog.storage.errors import CorruptLogError
from raftlog.storage.segments import fsync_dir

_HEADER = struct.Struct("<8sQQIQI")
_MAGIC = b"RSSNAP01"


DAMAGED_SUFFIX = ".damaged"
"""A damaged snapshot file set aside (kept for the operator, never read again)."""


class SnapshotStore:
    """tolerate_damage: a file that fails its checks is listed in `damaged` (path,
    reason) instead of raising CorruptLogError; the group decides whether it can do
    without it (GroupStorage.set_aside_damaged_snapshots, group_storage.py)."""

    def __init__(self, directory: str, tolerate_damage: bool = False) -> None:
        self.directory = directory
        self.damaged: list[tuple[str, str]] = []
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(directory, name))
        # index -> (meta, path). Mutated by save() (a worker thread: one insert) and
        # forget() (the event loop); read on the event loop. An index has one state
        # (snapshots cover committed entries only), so a second file for it replaces it.
        self._snaps: dict[int, tuple[SnapshotMeta, str]] = {}
        # Every file is read whole (CRC-checked): the newest is loaded by a restart, the
        # others may be sent to followers chunk by chunk (chunks are not checked again).
        for name in sorted(n for n in os.listdir(directory) if n.endswith(".snap")):
            path = os.path.join(directory, name)
            try:
                meta, _ = self._read(path)
            except CorruptLogError as exc:
                if not tolerate_damage:
                    raise
                self.damaged.append((path, str(exc)))
                continue
            self._snaps[meta.index] = (meta, path)

    def set_aside_damaged(self) -> list[str]:
        """Rename every damaged file to <name>.damaged, durably; returns the new paths."""
        moved = []
        for path, _why in self.damaged:
            os.replace(path, path + DAMAGED_SUFFIX)
            moved.append(path + DAMAGED_SUFFIX)
        if moved:
            fsync_dir(self.directory)
        self.damaged = []
        return moved

    def latest_meta(self) -> SnapshotMeta:
        latest = self._latest()
        return latest[0] if latest else SnapshotMeta()

    def indexes(self) -> list[int]:
        """Indexes of the snapshots kept, ascending."""
        return sorted(self._snaps)

    def meta_at(self, index: int) -> SnapshotMeta | None:
        got = self._snaps.get(index)
        return got[0] if got else None

    def _latest(self) -> tuple[SnapshotMeta, str] | None:
        snaps = self._snaps
        return snaps[max(snaps)] if snaps else None

    def load(self) -> Snapshot | None:
        """The newest snapshot, whole."""
        latest = self._latest()
        if latest is None:
            return None
        meta, data = self._read(latest[1])
        return Snapshot(meta, data)

    def chunk(self, offset: int, max_bytes: int, index: int | None = None) -> tuple[bytes, bool]:
        """Bytes [offset, offset+max_bytes) of the data of the snapshot at `index` (default:
        the newest), and whether that is the end."""
        got = self._latest() if index is None else self._snaps.get(index)
        if got is None:
            return b"", True
        _meta, path = got
        with open(path, "rb") as f:
            head = _HEADER.unpack(f.read(_HEADER.size))
            meta_len, data_len = head[3], head[4]
            f.seek(_HEADER.size + meta_len + offset)
            data = f.read(max(0, min(max_bytes, data_len - offset)))
        return data, offset + len(data) >= data_len

    def save(self, snap: Snapshot) -> None:
        """Write snap durably; it is kept beside the others until forget() drops them."""
        meta = snap.meta
        name = f"snapshot-{meta.index:020d}-{meta.term}.snap"
        path = os.path.join(self.directory, name)
        tmp = path + ".tmp"
        body_crc = crc32c.crc32c(snap.data, crc32c.crc32c(meta.data))
        with open(tmp, "wb") as f:
            f.write(
                _HEADER.pack(
                    _MAGIC, meta.index, meta.term, len(meta.data), len(snap.data), body_crc
                )
            )
            f.write(meta.data)
            f.write(snap.data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        old = self._snaps.get(meta.index)
        self._snaps[meta.index] = (meta, path)
        if old is not None and old[1] != path:
            os.unlink(old[1])

    def forget(self, keep: set[int]) -> list[str]:
        """Stop offering every snapshot whose index is not in keep (the newest is always
        kept); returns their files for delete_files(). Call it on the thread that reads
        chunks, so no chunk is read from a file being deleted."""
        snaps = self._snaps
        newest = max(snaps, default=None)
        doomed = [i for i in snaps if i not in keep and i != newest]
        return [snaps.pop(i)[1] for i in doomed]

    def drop_above(self, index: int) -> list[int]:
        """Forget and durably delete every snapshot above `index`; returns their indexes.

        For a log repaired down to `index` (raftlog/storage/repair.py): a snapshot
        ahead of the log would be loaded by a restart with no log entries under it
        (applied above the log's end). Its state is not lost: the leader holds it."""
        doomed = sorted(i for i in self._snaps if i > index)
        self.delete_files([self._snaps.pop(i)[1] for i in doomed])
        if doomed:
            fsync_dir(self.directory)
        return doomed

    def delete_files(self, paths: list[str]) -> None:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    @staticmethod
    def _read(path: str) -> tuple[SnapshotMeta, bytes]:
        with open(path, "rb") as f:
            raw = f.read()
        if len(raw) < _HEADER.size:
            raise CorruptLogError(path, 0, "snapshot header is cut short")
        magic, index, term, meta_len, data_len, crc = _HEADER.unpack_from(raw)
        if magic != _MAGIC:
            raise CorruptLogError(path, 0, "not a raftsink snapshot (bad magic)")
        body = raw[_HEADER.size :]
        if len(body) != meta_len + data_len:
            raise CorruptLogError(path, _HEADER.size, "snapshot body has the wrong length")
        if crc32c.crc32c(body) != crc:
            raise CorruptLogError(path, _HEADER.size, "snapshot CRC-32C mismatch")
        return SnapshotMeta(index, term, body[:meta_len]), body[meta_len:]


def check_snapshot_files(directory: str) -> tuple[list[int], list[tuple[str, int | None, str]]]:
    """Read-only check of a snapshots directory (`raftsink verify`): (the indexes of
    the intact snapshots, ascending; every damaged file as (path, the index its name
    gives or None, why)). Unlike SnapshotStore it creates, deletes and renames nothing."""
    intact: list[int] = []
    damaged: list[tuple[str, int | None, str]] = []
    if not os.path.isdir(directory):
        return intact, damaged
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".snap")):
        path = os.path.join(directory, name)
        try:
            meta, _ = SnapshotStore._read(path)
        except (CorruptLogError, OSError) as exc:
            damaged.append((path, _index_in_name(name), str(exc)))
            continue
        intact.append(meta.index)
    return sorted(intact), damaged


def _index_in_name(name: str) -> int | None:
    """snapshot-<index, 20 digits>-<term>.snap -> index (None: another name)."""
    parts = name[: -len(".snap")].split("-")
    if len(parts) == 3 and parts[0] == "snapshot" and parts[1].isdigit():
        return int(parts[1])
    return None
