"""The LMDB index: log index -> (segment, position, length, term), plus metadata.

Segments are the source of truth for entry bytes; this index is how a reader
finds an entry without scanning, and how a restart avoids scanning old segments.

Databases inside the LMDB environment:
  entries   u64be index -> Location (segment first index, position, frame length, term)
  segments  u64be segment first index -> (last index, end position) once sealed
  meta      name -> value: hard_state, first_index, checkpoint, snapshot, truncate_intent
  configs   u64be index -> b"" for every CONFIG entry (membership changes), so a
            restart finds the membership history without reading the log

One environment may hold the index of many group logs (LogEnvironment): then
every key of a group's log is prefixed by the group id as u64be (`prefix`), so
one map and one set of databases serve 1,000s of groups (named databases per
group would make every LMDB transaction cost O(groups)). A log opened on its
own (LogStore.open) has an empty prefix: its on-disk format is unchanged.
Invariant: every read and every cursor walk stays inside its prefix.

Map growth: the map (lmdb_map_bytes, 64 GiB by default) is address space, not
disk; a write that does not fit (lmdb.MapFullError) aborts, the map doubles and
the whole transaction is replayed. LMDB requires that no transaction of this
process is active while the map is resized, and readers run on other threads
(the event loop) than the writer: every transaction therefore holds a shared
share of a gate (`_ResizeGate`) that the resize takes exclusively. That is why
IndexWriter records its mutations and applies them at the end of `writer()`:
a replay after a resize re-runs them, unlike a caller's `with` body.

Durability: the environment runs with metasync off, so a commit flushes its
data pages but a power cut may undo the newest transaction. That is fine for
index checkpoints (recovery then scans a little more of the tail); writes that
must survive (hard state, truncation intents, prefix truncation) pass
durable=True, which forces the meta page to disk before returning.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
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
_IDENTITY_KEY = b"identity"

_MAX_GROWTHS = 16
"""Doublings tried for one transaction before MapFullError propagates (2**16 x the map)."""

log = logging.getLogger("raftlog.storage")


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


class _ResizeGate:
    """Many transactions at once, or one map resize alone (a readers-writer lock).

    Invariant: while `_resizing` is set no transaction is active in this process
    (mdb_env_set_mapsize's precondition, which LMDB does not check for readers).
    A waiting resize blocks new transactions, so it cannot starve."""

    __slots__ = ("_active", "_cond", "_lock", "_resizing")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._active = 0
        self._resizing = False

    def enter(self) -> None:
        """Begin a transaction (plain methods, not a context manager: this is on every
        index read, where a generator-based context manager tripled the cost)."""
        with self._lock:  # the condition's own lock, taken directly (cheaper)
            while self._resizing:
                self._cond.wait()
            self._active += 1

    def leave(self) -> None:
        with self._lock:
            self._active -= 1
            if self._resizing and self._active == 0:
                self._cond.notify_all()

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            while self._active:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


class IndexEnv:
    """An open LMDB environment and its four databases (one per log, or shared).

    Every transaction goes through `read` or `write` (see the module doc: map growth)."""

    def __init__(self, path: str, map_size: int, readonly: bool = False) -> None:
        if not readonly:
            os.makedirs(path, exist_ok=True)
        self.path = path
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
        self.entries = self.env.open_db(b"entries")
        self.segments = self.env.open_db(b"segments")
        self.meta = self.env.open_db(b"meta")
        self.configs = self.env.open_db(b"configs")
        self._gate = _ResizeGate()
        self.resizes = 0
        """Times the map was grown (monotonic)."""

    def get(self, db: object, key: bytes) -> bytes | None:
        """One key's value (a copy), in its own read transaction."""
        gate = self._gate
        gate.enter()
        try:
            with self.env.begin(db=db) as txn:
                return txn.get(key)
        finally:
            gate.leave()

    @contextmanager
    def read(self, db: object) -> Iterator[lmdb.Transaction]:
        """A read transaction for scans (held until the `with` ends)."""
        with self._gate.shared(), self.env.begin(db=db, buffers=False) as txn:
            yield txn

    def write(self, apply: Callable[[lmdb.Transaction], None], durable: bool = False) -> None:
        """Run apply in one write transaction; on MapFullError grow the map and run it
        again (apply must only touch the transaction). durable: synced on return."""
        for _ in range(_MAX_GROWTHS):
            try:
                with self._gate.shared(), self.env.begin(write=True) as txn:
                    apply(txn)
                break
            except lmdb.MapFullError:
                self.grow()  # the transaction was aborted: nothing of it is left
        else:
            raise lmdb.MapFullError(f"{self.path}: map still full after {_MAX_GROWTHS} growths")
        if durable:
            self.env.sync(True)

    def grow(self) -> None:
        """Double the map (address space only; the file grows as pages are used)."""
        with self._gate.exclusive():
            old = self.env.info()["map_size"]
            self.env.set_mapsize(old * 2)
            self.resizes += 1
        log.warning("storage.lmdb_map_grown path=%s from=%d to=%d", self.path, old, old * 2)

    def close(self) -> None:
        with self._gate.exclusive():
            self.env.close()


def group_prefix(group_id: int) -> bytes:
    """The key prefix of group_id's log in a shared environment."""
    return _KEY.pack(group_id)


class LogIndex:
    """Typed access to one log's index (its own environment or a prefix of a shared one).

    Thread-safe for readers.
    """

    def __init__(
        self,
        path: str,
        map_size: int,
        readonly: bool = False,
        *,
        shared: IndexEnv | None = None,
        prefix: bytes = b"",
    ) -> None:
        if shared is None and prefix:
            raise ValueError("a key prefix needs a shared environment")
        self._owner = shared is None
        ix = shared if shared is not None else IndexEnv(path, map_size, readonly)
        self._ix = ix
        self.env = ix.env
        self._entries = ix.entries
        self._segments = ix.segments
        self._meta = ix.meta
        self._configs = ix.configs
        self._prefix = prefix
        self._plen = len(prefix)

    def close(self) -> None:
        if self._owner:
            self._ix.close()

    def _k(self, index: int) -> bytes:
        return self._prefix + _KEY.pack(index)

    def _scan(self, txn: lmdb.Transaction, db: object) -> Iterator[tuple[int, bytes]]:
        """(index, value) of every key of this log in db, ascending."""
        prefix, plen = self._prefix, self._plen
        cur = txn.cursor(db=db)
        if not (cur.set_range(prefix) if prefix else cur.first()):
            return
        for key, val in cur:
            if key[:plen] != prefix:
                return
            yield _KEY.unpack(key[plen:])[0], val

    # -- reads -------------------------------------------------------------

    def location(self, index: int) -> Location | None:
        raw = self._ix.get(self._entries, self._k(index))
        return Location._make(_LOCATION.unpack(raw)) if raw is not None else None

    def iter_locations(self) -> Iterator[tuple[int, Location]]:
        """Every (index, location) in order; for verify only (a full scan)."""
        with self._ix.read(self._entries) as txn:
            for index, val in self._scan(txn, self._entries):
                yield index, Location._make(_LOCATION.unpack(val))

    def config_indexes(self) -> list[int]:
        with self._ix.read(self._configs) as txn:
            return [index for index, _ in self._scan(txn, self._configs)]

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
        with self._ix.read(self._segments) as txn:
            return {
                i: SealedSegment._make(_SEALED.unpack(v))
                for i, v in self._scan(txn, self._segments)
            }

    def identity(self) -> int:
        """The storage incarnation stamped in this index (0: none)."""
        raw = self._get_meta(_IDENTITY_KEY)
        return _KEY.unpack(raw)[0] if raw else 0

    def _get_meta(self, key: bytes) -> bytes | None:
        return self._ix.get(self._meta, self._prefix + key)

    # -- writes ------------------------------------------------------------

    @contextmanager
    def writer(self, durable: bool) -> Iterator[IndexWriter]:
        """One atomic LMDB transaction of the mutations recorded in the `with` body
        (applied when it ends without error; nothing is written if it raises);
        durable=True returns only once it is on disk."""
        w = IndexWriter(self)
        yield w
        self._ix.write(w.apply, durable)

    def commit_together(self, writers: Sequence[IndexWriter], durable: bool) -> None:
        """The mutations of several logs' writers in ONE transaction; every writer's
        log must share this log's environment."""
        for w in writers:
            if w._ix._ix is not self._ix:
                raise ValueError("commit_together: the logs do not share one index")

        def apply(txn: lmdb.Transaction) -> None:
            for w in writers:
                w.apply(txn)

        self._ix.write(apply, durable)


class IndexWriter:
    """Mutations of one log, recorded and applied in one write transaction
    (LogIndex.writer). Recorded, not applied at once, so that a transaction
    aborted by a full map can be replayed after the map grew."""

    def __init__(self, index: LogIndex) -> None:
        self._ix = index
        self._ops: list[Callable[[lmdb.Transaction], None]] = []

    def apply(self, txn: lmdb.Transaction) -> None:
        for op in self._ops:
            op(txn)

    def put_locations(self, first: int, locations: list[Location]) -> None:
        pack, k = _LOCATION.pack, self._ix._k
        items = [(k(first + i), pack(*loc)) for i, loc in enumerate(locations)]
        db = self._ix._entries
        # append=True (a fast path) needs keys above every key in the database,
        # true only when this log is alone in its environment.
        append = not self._ix._prefix
        self._ops.append(
            lambda txn: txn.cursor(db=db).putmulti(items, append=append, overwrite=True)
        )

    def delete_from(self, index: int) -> None:
        """Remove every entry (and config marker) >= index."""
        ix = self._ix
        prefix, plen, start = ix._prefix, ix._plen, ix._k(index)

        def op(txn: lmdb.Transaction) -> None:
            for db in (ix._entries, ix._configs):
                cur = txn.cursor(db=db)
                if cur.set_range(start):
                    while cur.key()[:plen] == prefix and cur.delete():
                        pass

        self._ops.append(op)

    def put_configs(self, indexes: list[int]) -> None:
        keys = [self._ix._k(i) for i in indexes]
        db = self._ix._configs

        def op(txn: lmdb.Transaction) -> None:
            for key in keys:
                txn.put(key, b"", db=db)

        self._ops.append(op)

    def delete_below(self, index: int) -> None:
        """Remove every entry and config marker < index (walks the removed range once)."""
        ix = self._ix
        prefix, plen = ix._prefix, ix._plen

        def op(txn: lmdb.Transaction) -> None:
            for db in (ix._entries, ix._configs):
                cur = txn.cursor(db=db)
                if cur.set_range(prefix) if prefix else cur.first():
                    while (key := cur.key()) and key[:plen] == prefix:
                        if _KEY.unpack(key[plen:])[0] >= index or not cur.delete():
                            break

        self._ops.append(op)

    def seal_segment(self, segment: int, last_index: int, end: int) -> None:
        key, value, db = self._ix._k(segment), _SEALED.pack(last_index, end), self._ix._segments
        self._ops.append(lambda txn: txn.put(key, value, db=db))

    def forget_segment(self, segment: int) -> None:
        key, db = self._ix._k(segment), self._ix._segments
        self._ops.append(lambda txn: txn.delete(key, db=db))

    def _put_meta(self, key: bytes, value: bytes) -> None:
        k, db = self._ix._prefix + key, self._ix._meta
        self._ops.append(lambda txn: txn.put(k, value, db=db))

    def _delete_meta(self, key: bytes) -> None:
        k, db = self._ix._prefix + key, self._ix._meta
        self._ops.append(lambda txn: txn.delete(k, db=db))

    def set_identity(self, incarnation: int) -> None:
        self._put_meta(_IDENTITY_KEY, _KEY.pack(incarnation))

    def set_hard_state(self, hs: HardState) -> None:
        self._put_meta(_HARD_STATE_KEY, _HARD_STATE.pack(*hs))

    def set_first_index(self, index: int, prev_term: int) -> None:
        self._put_meta(_FIRST_INDEX_KEY, _FIRST.pack(index, prev_term))

    def set_checkpoint(self, cp: Checkpoint | None) -> None:
        if cp is None:
            self._delete_meta(_CHECKPOINT_KEY)
        else:
            self._put_meta(_CHECKPOINT_KEY, _CHECKPOINT.pack(*cp))

    def set_snapshot(self, meta: SnapshotMeta) -> None:
        self._put_meta(_SNAPSHOT_KEY, _SNAPSHOT_HEAD.pack(meta.index, meta.term) + meta.data)

    def set_truncate_intent(self, intent: TruncateIntent | None) -> None:
        if intent is None:
            self._delete_meta(_INTENT_KEY)
        else:
            self._put_meta(_INTENT_KEY, _INTENT.pack(*intent))
