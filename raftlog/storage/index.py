"""The LMDB index: log index -> (segment, position, length, term), plus metadata.

Segments are the source of truth for entry bytes; this index is how a reader
finds an entry without scanning, and how a restart avoids scanning old segments.

Databases inside the LMDB environment:
  entries   u64be index -> Location (segment first index, position, frame length, term)
  segments  u64be segment first index -> (last index, end position) once sealed
  meta      name -> value: hard_state, first_index, checkpoint, snapshot, truncate_intent
  configs   u64be index -> b"" for every CONFIG entry (membership changes), so a
            restart finds the membership history without reading the log

Durability: the environment runs with metasync off, so a commit flushes its
data pages but a power cut may undo the newest transaction. That is fine for
index checkpoints (recovery then scans a little more of the tail); writes that
must survive (hard state, truncation intents, prefix truncation) pass
durable=True, which forces the meta page to disk before returning.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import lmdb

from raftlog.entry import HardState, SnapshotMeta

_KEY = struct.Struct(">Q")
_LOCATION = struct.Struct("<QQIQ")
_SEALED = struct.Struct("<QQ")
_HARD_STATE = struct.Struct("<QQQ")
_CHECKPOINT = struct.Struct("<QQQQ")
_SNAPSHOT_HEAD = struct.Struct("<QQ")
_INTENT = struct.Struct("<QQQ")
_FIRST = struct.Struct("<QQ")

_HARD_STATE_KEY = b"hard_state"
_FIRST_INDEX_KEY = b"first_index"
_CHECKPOINT_KEY = b"checkpoint"
_SNAPSHOT_KEY = b"snapshot"
_INTENT_KEY = b"truncate_intent"


class Location(NamedTuple):
    segment: int  # first index of the segment file holding the entry
    position: int
    length: int
    term: int


class Checkpoint(NamedTuple):
    """The newest entry the index holds and where its segment's indexed bytes end.

    Recovery scans only from (segment, end) onward: restart cost is bounded by
    the checkpoint interval, not by the log's size.
    """

    last_index: int
    last_term: int
    segment: int
    end: int


class TruncateIntent(NamedTuple):
    """A suffix truncation that was decided but maybe not yet done on the files."""

    from_index: int
    segment: int
    position: int


class SealedSegment(NamedTuple):
    last_index: int
    end: int


def encode_key(index: int) -> bytes:
    return _KEY.pack(index)


class LogIndex:
    """Typed access to the LMDB environment of one log. Thread-safe for readers."""

    def __init__(self, path: str, map_size: int, readonly: bool = False) -> None:
        if not readonly:
            os.makedirs(path, exist_ok=True)
        self.env = lmdb.open(
            path,
            map_size=map_size,
            max_dbs=5,
            metasync=False,
            sync=True,
            readahead=False,
            max_readers=256,
            readonly=readonly,
            lock=not readonly,
        )
        self._entries = self.env.open_db(b"entries")
        self._segments = self.env.open_db(b"segments")
        self._meta = self.env.open_db(b"meta")
        self._configs = self.env.open_db(b"configs")

    def close(self) -> None:
        self.env.close()

    # -- reads -------------------------------------------------------------

    def location(self, index: int) -> Location | None:
        with self.env.begin(db=self._entries, buffers=False) as txn:
            raw = txn.get(_KEY.pack(index))
        return Location._make(_LOCATION.unpack(raw)) if raw is not None else None

    def iter_locations(self) -> Iterator[tuple[int, Location]]:
        """Every (index, location) in order; for verify only (a full scan)."""
        with self.env.begin(db=self._entries) as txn:
            for key, val in txn.cursor():
                yield _KEY.unpack(key)[0], Location._make(_LOCATION.unpack(val))

    def config_indexes(self) -> list[int]:
        with self.env.begin(db=self._configs) as txn:
            return [_KEY.unpack(k)[0] for k in txn.cursor().iternext(keys=True, values=False)]

    def hard_state(self) -> HardState:
        raw = self._get_meta(_HARD_STATE_KEY)
        return HardState._make(_HARD_STATE.unpack(raw)) if raw else HardState()

    def first_index(self) -> tuple[int, int] | None:
        """(first index, term of the entry before it), None for a new log."""
        raw = self._get_meta(_FIRST_INDEX_KEY)
        return _FIRST.unpack(raw) if raw else None

    def checkpoint(self) -> Checkpoint | None:
        raw = self._get_meta(_CHECKPOINT_KEY)
        return Checkpoint._make(_CHECKPOINT.unpack(raw)) if raw else None

    def snapshot(self) -> SnapshotMeta:
        raw = self._get_meta(_SNAPSHOT_KEY)
        if not raw:
            return SnapshotMeta()
        index, term = _SNAPSHOT_HEAD.unpack_from(raw)
        return SnapshotMeta(index, term, bytes(raw[_SNAPSHOT_HEAD.size :]))

    def truncate_intent(self) -> TruncateIntent | None:
        raw = self._get_meta(_INTENT_KEY)
        return TruncateIntent._make(_INTENT.unpack(raw)) if raw else None

    def sealed_segments(self) -> dict[int, SealedSegment]:
        with self.env.begin(db=self._segments) as txn:
            return {
                _KEY.unpack(k)[0]: SealedSegment._make(_SEALED.unpack(v)) for k, v in txn.cursor()
            }

    def _get_meta(self, key: bytes) -> bytes | None:
        with self.env.begin(db=self._meta) as txn:
            return txn.get(key)

    # -- writes ------------------------------------------------------------

    @contextmanager
    def writer(self, durable: bool) -> Iterator[IndexWriter]:
        """One atomic LMDB transaction; durable=True returns only once it is on disk."""
        with self.env.begin(write=True) as txn:
            yield IndexWriter(self, txn)
        if durable:
            self.env.sync(True)


class IndexWriter:
    """Mutations inside one write transaction (see LogIndex.writer)."""

    def __init__(self, index: LogIndex, txn: lmdb.Transaction) -> None:
        self._ix = index
        self._txn = txn

    def put_locations(self, first: int, locations: list[Location]) -> None:
        pack, key = _LOCATION.pack, _KEY.pack
        items = [(key(first + i), pack(*loc)) for i, loc in enumerate(locations)]
        cur = self._txn.cursor(db=self._ix._entries)
        cur.putmulti(items, append=True, overwrite=True)

    def delete_from(self, index: int) -> None:
        """Remove every entry (and config marker) >= index."""
        for db in (self._ix._entries, self._ix._configs):
            cur = self._txn.cursor(db=db)
            if cur.set_range(_KEY.pack(index)):
                while cur.delete():
                    pass

    def put_configs(self, indexes: list[int]) -> None:
        for i in indexes:
            self._txn.put(_KEY.pack(i), b"", db=self._ix._configs)

    def delete_below(self, index: int) -> None:
        """Remove every entry and config marker < index (walks the removed range once)."""
        for db in (self._ix._entries, self._ix._configs):
            cur = self._txn.cursor(db=db)
            if cur.first():
                while (key := cur.key()) and _KEY.unpack(key)[0] < index:
                    if not cur.delete():
                        break

    def seal_segment(self, segment: int, last_index: int, end: int) -> None:
        self._txn.put(_KEY.pack(segment), _SEALED.pack(last_index, end), db=self._ix._segments)

    def forget_segment(self, segment: int) -> None:
        self._txn.delete(_KEY.pack(segment), db=self._ix._segments)

    def set_hard_state(self, hs: HardState) -> None:
        self._txn.put(_HARD_STATE_KEY, _HARD_STATE.pack(*hs), db=self._ix._meta)

    def set_first_index(self, index: int, prev_term: int) -> None:
        self._txn.put(_FIRST_INDEX_KEY, _FIRST.pack(index, prev_term), db=self._ix._meta)

    def set_checkpoint(self, cp: Checkpoint | None) -> None:
        if cp is None:
            self._txn.delete(_CHECKPOINT_KEY, db=self._ix._meta)
        else:
            self._txn.put(_CHECKPOINT_KEY, _CHECKPOINT.pack(*cp), db=self._ix._meta)

    def set_snapshot(self, meta: SnapshotMeta) -> None:
        value = _SNAPSHOT_HEAD.pack(meta.index, meta.term) + meta.data
        self._txn.put(_SNAPSHOT_KEY, value, db=self._ix._meta)

    def set_truncate_intent(self, intent: TruncateIntent | None) -> None:
        if intent is None:
            self._txn.delete(_INTENT_KEY, db=self._ix._meta)
        else:
            self._txn.put(_INTENT_KEY, _INTENT.pack(*intent), db=self._ix._meta)
