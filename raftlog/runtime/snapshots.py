"""Snapshot files: one file per snapshot, written atomically, CRC-checked.

    snapshots/snapshot-<index:020d>-<term>.snap
      header: magic b"RSSNAP01", index u64, term u64, meta length u32,
              data length u64, CRC-32C u32 of (meta + data)
      meta bytes (membership), data bytes (the application's state)

Written to a temporary name, fsync'ed, renamed, directory fsync'ed: a crash
leaves either the old snapshot or the new one, never half of one.
"""

from __future__ import annotations

import os
import struct

import crc32c

from raftlog.core.log_reader import Snapshot
from raftlog.entry import SnapshotMeta
from raftlog.storage.errors import CorruptLogError

_HEADER = struct.Struct("<8sQQIQI")
_MAGIC = b"RSSNAP01"


class SnapshotStore:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(directory, name))
        self._latest: tuple[SnapshotMeta, str] | None = None
        newest = sorted(n for n in os.listdir(directory) if n.endswith(".snap"))
        if newest:
            path = os.path.join(directory, newest[-1])
            meta, _ = self._read(path)
            self._latest = (meta, path)

    def latest_meta(self) -> SnapshotMeta:
        return self._latest[0] if self._latest else SnapshotMeta()

    def load(self) -> Snapshot | None:
        if self._latest is None:
            return None
        meta, data = self._read(self._latest[1])
        return Snapshot(meta, data)

    def chunk(self, offset: int, max_bytes: int) -> tuple[bytes, bool]:
        """Bytes [offset, offset+max_bytes) of the latest snapshot's data, and whether that is the end."""
        if self._latest is None:
            return b"", True
        _meta, path = self._latest
        with open(path, "rb") as f:
            head = _HEADER.unpack(f.read(_HEADER.size))
            meta_len, data_len = head[3], head[4]
            f.seek(_HEADER.size + meta_len + offset)
            data = f.read(max(0, min(max_bytes, data_len - offset)))
        return data, offset + len(data) >= data_len

    def save(self, snap: Snapshot) -> None:
        """Write snap durably and make it the latest; older snapshots are removed."""
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
        old = self._latest
        self._latest = (meta, path)
        if old is not None and old[1] != path:
            os.unlink(old[1])

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
