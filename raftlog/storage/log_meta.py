"""LogStore's records beside the log (split out of log_store.py; behaviour unchanged):
the hard state (term, vote, commit checkpoint), the latest snapshot's record and the
identity stamp, all in the LMDB index.

Ordering duties: save_hard_state and save_snapshot_meta are durable on return (unless
durable=False: a commit-only checkpoint a crash may undo); save_hard_states writes the
hard states of several logs sharing one index in ONE transaction and one sync.

A mixin: the state it changes is LogStore's, documented there; every public mutation
takes the store's write lock like every other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from raftlog.entry import HardState, SnapshotMeta
from raftlog.storage.index import IndexWriter

if TYPE_CHECKING:
    from raftlog.storage.log_store import LogStore


class MetaMixin:
    """LogStore's hard state, snapshot record and identity stamp."""

    def identity_stamp(self) -> int:
        """The incarnation stamped in this log's index (0: none; see storage/identity.py)."""
        self._check_open()
        return self._index.identity()

    def stamp_identity(self, incarnation: int, durable: bool = True) -> None:
        """Stamp the incarnation in this log's index (durable on return unless
        durable=False: then with the next forced write, e.g. the hard state). The
        stamp lives beside the hard state, so an index that was lost or rebuilt has
        none and its vote record cannot be vouched for."""
        with self._write_lock:
            self._check_open()
            with self._index.writer(durable=durable) as w:
                w.set_identity(incarnation)

    def is_blank(self) -> bool:
        """Nothing Raft wrote is here: no term, vote, entry or snapshot."""
        hs = self.hard_state()
        return (
            hs.term == 0
            and hs.vote == 0
            and self.last_index() == 0
            and self.snapshot_meta().index == 0
        )

    def save_hard_state(self, hs: HardState, durable: bool = True) -> None:
        """Persist term, vote and commit checkpoint atomically; durable on return
        unless durable=False (a commit-only checkpoint: a crash may undo it)."""
        with self._write_lock:
            self._check_open()
            self._guard(self._write_meta, "hard_state", hs, durable)
            self._hard_state = hs

    @property
    def index_key(self) -> int:
        """Identity of the LMDB environment holding this log's index (logs of one
        LogEnvironment share it): hard states of logs with one key can be saved
        together by save_hard_states."""
        return id(self._index.env)

    @staticmethod
    def save_hard_states(items: Sequence[tuple[LogStore, HardState]]) -> None:
        """save_hard_state for several logs sharing one index (equal index_key):
        ONE LMDB transaction and one sync for all of them; durable on return.

        Called by the disk writer's thread only (the logs' single writer)."""
        if not items:
            return
        first = items[0][0]
        writers = []
        for store, hs in items:
            store._check_open()
            w = IndexWriter(store._index)
            w.set_hard_state(hs)
            writers.append(w)
        try:
            first._index.commit_together(writers, durable=True)
        except ValueError:
            raise  # the logs do not share one index: nothing was written
        except BaseException as exc:
            for store, _ in items:
                store._failed = exc
            raise
        for store, hs in items:
            store._hard_state = hs

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
