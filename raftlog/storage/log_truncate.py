"""LogStore's truncations and reset (split out of log_store.py; behaviour unchanged).

Ordering duties on disk:
- truncate_suffix: a durable intent in LMDB first, then the files are cut,
  then the intent is durably cleared. A crash in between redoes the cut
  (log_recovery.py).
- truncate_prefix: the new first index is durable before files are deleted;
  leftover files below it are deleted on the next open. With release_later the
  deletes (files, their directory fsync, the index rows below the new first
  index) run on a releaser thread after the call returns, so that appends queued
  behind the cut do not wait for them (retention cutting many segments at once
  stalled produce for 250-300 ms: bench/soak.py, docs/storage.md).
- reset (installing a snapshot): the whole log goes; the next append is the
  snapshot's index + 1.

A mixin: the state it changes is LogStore's, documented there; every public
method takes the store's write lock like every other mutation.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading

from raftlog.entry import SnapshotMeta
from raftlog.storage.errors import LogRangeError
from raftlog.storage.index import Checkpoint, Location, TruncateIntent
from raftlog.storage.segments import FILE_HEADER_SIZE, Segment, fsync_dir

log = logging.getLogger("raftlog.storage")


class TruncateMixin:
    """LogStore's truncate_suffix / truncate_prefix / reset."""

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
            self._active.cut_at(loc.position)
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

    def truncate_prefix(self, upto: int, release_later: bool = False) -> None:
        """Forget entries <= upto (they are in a snapshot); durable on return.

        Whole segment files below the new first index are deleted; the segment
        holding it stays (its leading entries become unreachable). release_later:
        those deletes (and the index rows below the new first index) happen on the
        releaser thread after the return (`wait_released` waits for them; close
        does too); nothing reads them any more, and a crash before they happen
        leaves files the next open deletes and rows below the first index.
        """
        with self._write_lock:
            self._check_open()
            self._guard(self._truncate_prefix_locked, upto, release_later)

    def _truncate_prefix_locked(self, upto: int, release_later: bool = False) -> None:
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
        # The index keeps the cut segments' seal records until their files are gone:
        # a crash before that leaves sealed segments wholly below the first index,
        # which the next open deletes (log_recovery.py).
        with self._index.writer(durable=True) as w:
            w.set_first_index(upto + 1, term)
        firsts = [seg.first_index for seg in doomed]
        if not release_later:
            self._release_below(firsts)
            return
        # One release at a time, in order: a second cut waits for the first's (cuts
        # come one snapshot apart, so this wait is rare and short).
        self.wait_released()
        t = threading.Thread(
            target=self._release_in_background, args=(firsts,), name="log-release", daemon=True
        )
        self._releaser = t
        t.start()

    _releaser: threading.Thread | None = None

    def wait_released(self) -> None:
        """Wait until the deletes of every earlier truncate_prefix(release_later) ran."""
        t = self._releaser
        if t is not None and t is not threading.current_thread():
            t.join()
        self._releaser = None

    def _release_in_background(self, firsts: list[int]) -> None:
        try:
            self._release_below(firsts)
        except Exception:  # files left behind are deleted by the next open
            log.exception("storage.release_failed dir=%s", self._seg_dir)

    def _release_below(self, firsts: list[int]) -> None:
        """Delete the files of segments cut off below the first index, then the index
        rows below it. Safe off the write lock: a segment named f is only ever made by
        an append at index f, and f is below the first index, which only moves up
        (a reset installs a snapshot above it), so no live segment has that name; rows
        below the first index are read by nobody (it is re-read here, under the lock)."""
        for first in firsts:
            self._delete_file(first, sync_dir=False)
        if firsts:
            fsync_dir(self._seg_dir)
        with self._lock:
            below = self._first
        with self._index.writer(durable=False) as w:
            for first in firsts:
                w.forget_segment(first)
            w.delete_below(below)

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
