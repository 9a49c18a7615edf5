"""DiskQueue: braft's LogManager disk thread, in front of a LogStore.

Callers on the asyncio event loop submit operations and get futures; a
writer thread (disk_writer.DiskWriter: private to this queue, or shared by
every group of a RaftHost) takes everything queued (up to a cap in entries and
bytes), writes it with one write and ONE fdatasync (one fsync round for all the
groups of the round), then completes all of the batch's futures with a single
hop back to the loop. Truncations, resets and hard-state saves go through the
same queue, so they are ordered with the appends around them exactly as
submitted.

The in-memory tail holds every entry from submission until it is both durable
and applied (set_applied), so the leader can send entries to followers and the
state machine can read them before this node's own fsync returns. Reads through
the queue look at the tail first, then at the store.

The event loop never touches the disk for writes; reads of entries that left
the tail go to the store (page-cache reads, no fsync).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from raftlog.entry import HardState, LogEntry, SnapshotMeta
from raftlog.storage.disk_writer import DiskWriter, WriterStats
from raftlog.storage.errors import LogRangeError, StorageClosedError
from raftlog.storage.log_store import LogStore

log = logging.getLogger("raftlog.storage")

_APPEND, _TRUNCATE_SUFFIX, _TRUNCATE_PREFIX, _RESET, _HARD_STATE, _SNAPSHOT, _SYNC, _CLOSE = range(
    8
)


@dataclass(slots=True)
class _Op:
    kind: int
    future: asyncio.Future
    entries: Sequence[LogEntry] = ()
    nbytes: int = 0
    arg: object = None
    # An append counts as durable only up to `cap`: a truncation submitted
    # after it lowers the cap, so a late completion never vouches for entries
    # that were replaced in the meantime.
    cap: int = 2**63


@dataclass(slots=True)
class QueueStats:
    batches: int = 0
    batched_ops: int = 0
    max_batch_entries: int = 0
    write_seconds: float = 0.0


class DiskQueue:
    """Ordered, batched, asynchronous access to a LogStore for one event loop.

    Must be created and used from the loop's thread; the writer thread is
    private. `durable_index` is the last index known durable on this node (the
    value that may be counted toward a Raft quorum).
    """

    def __init__(
        self,
        store: LogStore,
        loop: asyncio.AbstractEventLoop | None = None,
        writer: DiskWriter | None = None,
    ) -> None:
        self.store = store
        self.options = store.options
        self.stats = QueueStats()
        self._loop = loop or asyncio.get_running_loop()
        # Without a writer the queue owns a private one (closed with the queue).
        self._own_writer = writer is None
        self._writer = writer if writer is not None else DiskWriter(self._loop)
        if self._writer.loop is not self._loop:
            raise ValueError("a disk queue and its writer must share one event loop")
        self._cond = self._writer.cond  # guards _ops (shared with the writer thread)
        self._ops: collections.deque[_Op] = collections.deque()
        self._closing = False
        self._failed: BaseException | None = None
        self._failed_now: list[_Op] = []  # writer thread only: ops failed in this round
        self._dirty = False  # writer thread: appends written, not yet synced
        # writer thread: a hard-state op of this round, saved by the writer together
        # with every other group's (one LMDB transaction and one sync per round)
        self._staged_hs: _Op | None = None
        # Tail: entries [_tail_base, _tail_base + len(_tail)) in submission order.
        self._tail: list[LogEntry] = []
        self._tail_base = store.last_index() + 1
        self._last = store.last_index()
        self._last_term = store.last_term()
        self.durable_index = store.last_index()
        self._applied = 0
        self._pending_bytes = 0
        self._inflight: collections.deque[_Op] = collections.deque()  # appends not yet completed
        self._space = asyncio.Event()
        self._space.set()

    # ------------------------------------------------------------ submission

    def append(self, entries: Sequence[LogEntry]) -> asyncio.Future[int]:
        """Queue entries (dense, following last_index()); the future gives the
        batch's last index once it is durable. Readable at once."""
        if not entries:
            raise ValueError("append: no entries")
        if entries[0].index != self._last + 1:
            raise ValueError(f"append: entry {entries[0].index} does not follow {self._last}")
        nbytes = sum(len(e.data) for e in entries)
        self._tail.extend(entries)
        self._last = entries[-1].index
        self._last_term = entries[-1].term
        self._pending_bytes += nbytes
        if self._pending_bytes > self.options.queue_max_pending_bytes:
            self._space.clear()
        op = _Op(_APPEND, self._loop.create_future(), entries, nbytes)
        self._inflight.append(op)
        return self._submit(op)

    def truncate_suffix(self, from_index: int) -> asyncio.Future[None]:
        """Remove entries >= from_index; invisible to readers at once, durable when done."""
        if from_index <= self._last:
            keep = max(0, from_index - self._tail_base)
            del self._tail[keep:]
            if from_index < self._tail_base:
                self._tail_base = from_index
            self._last = from_index - 1
            self._last_term = self.term_at(self._last) or 0
            self.durable_index = min(self.durable_index, self._last)
            for op in self._inflight:
                op.cap = min(op.cap, self._last)
        return self._submit(_Op(_TRUNCATE_SUFFIX, self._loop.create_future(), arg=from_index))

    def truncate_prefix(self, upto: int) -> asyncio.Future[None]:
        """Forget entries <= upto (covered by a snapshot)."""
        return self._submit(_Op(_TRUNCATE_PREFIX, self._loop.create_future(), arg=upto))

    def reset(self, next_index: int, snapshot: SnapshotMeta) -> asyncio.Future[None]:
        """Drop the whole log (installing a snapshot); next append is next_index."""
        self._tail.clear()
        self._tail_base = next_index
        self._last, self._last_term = next_index - 1, snapshot.term
        self.durable_index = min(self.durable_index, self._last)
        for op in self._inflight:
            op.cap = min(op.cap, self._last)
        return self._submit(_Op(_RESET, self._loop.create_future(), arg=(next_index, snapshot)))

    def save_hard_state(self, hs: HardState, durable: bool = True) -> asyncio.Future[None]:
        """Persist term/vote/commit, ordered after earlier appends; with
        durable=False (commit checkpoints only) it is written but not fsynced."""
        return self._submit(_Op(_HARD_STATE, self._loop.create_future(), arg=(hs, durable)))

    def save_snapshot_meta(self, meta: SnapshotMeta) -> asyncio.Future[None]:
        return self._submit(_Op(_SNAPSHOT, self._loop.create_future(), arg=meta))

    def sync(self) -> asyncio.Future[None]:
        """Completes once everything submitted before it is fdatasync'ed (write caching too)."""
        return self._submit(_Op(_SYNC, self._loop.create_future()))

    def _submit(self, op: _Op) -> asyncio.Future:
        if self._failed is not None:
            err = StorageClosedError(f"disk queue failed: {self._failed!r}")
            err.__cause__ = self._failed  # serve() looks for a CorruptLogError cause
            op.future.set_exception(err)
            return op.future
        if self._closing:
            op.future.set_exception(StorageClosedError("disk queue is closed"))
            return op.future
        with self._cond:
            self._ops.append(op)
            self._writer.notify(self)
        return op.future

    async def wait_for_space(self) -> None:
        """Back-pressure: returns once unflushed bytes are under queue_max_pending_bytes."""
        while self._pending_bytes > self.options.queue_max_pending_bytes:
            self._space.clear()
            await self._space.wait()

    @property
    def pending_bytes(self) -> int:
        """Payload bytes submitted but not yet durable."""
        return self._pending_bytes

    # ----------------------------------------------------------------- reads

    def first_index(self) -> int:
        return self.store.first_index()

    def last_index(self) -> int:
        """Last submitted entry (maybe not yet durable)."""
        return self._last

    def last_term(self) -> int:
        return self._last_term

    def term_at(self, index: int) -> int | None:
        k = index - self._tail_base
        if 0 <= k < len(self._tail):
            return self._tail[k].term
        if index > self._last:
            return None
        return self.store.term_at(index)

    def read(self, start: int, max_count: int, max_bytes: int) -> list[LogEntry]:
        """As LogStore.read, including entries still only in the tail."""
        if start > self._last or start < self.store.first_index():
            raise LogRangeError(f"entry {start} is outside [{self.first_index()}, {self._last}]")
        stop = min(self._last + 1, start + max_count)
        if start >= self._tail_base:
            out: list[LogEntry] = []
            size = 0
            for e in self._tail[start - self._tail_base : stop - self._tail_base]:
                out.append(e)
                size += len(e.data)
                if size >= max_bytes:
                    break
            return out
        # Entries below the tail are durable: the store has them.
        store_stop = min(stop, self._tail_base)
        out = self.store.read(start, store_stop - start, max_bytes)
        size = sum(len(e.data) for e in out)
        if len(out) == store_stop - start and size < max_bytes and stop > store_stop:
            out.extend(self.read(store_stop, stop - store_stop, max_bytes - size))
        return out

    def set_applied(self, index: int) -> None:
        """The state machine has applied up to index: drop durable+applied tail entries."""
        self._applied = max(self._applied, index)
        self._trim_tail()

    def _trim_tail(self) -> None:
        upto = min(self._applied, self.durable_index)
        k = upto - self._tail_base + 1
        if k > 0:
            del self._tail[:k]
            self._tail_base += k

    @property
    def tail_length(self) -> int:
        return len(self._tail)

    # ---------------------------------------------------------------- closing

    async def close(self) -> None:
        """Finish every queued operation, close the store (and a private writer)."""
        if self._closing:
            return
        fut = self._submit(_Op(_CLOSE, self._loop.create_future()))
        self._closing = True
        try:
            await fut
        except StorageClosedError:
            if self._failed is None:
                raise
            with contextlib.suppress(Exception):  # already failed: release what we can
                await asyncio.to_thread(self.store.close)
        finally:
            if self._own_writer:
                await self._writer.close()

    # ---------------------------------------------------------- writer thread
    # Called by the DiskWriter's thread only (one round at a time).

    def _take_ops(self) -> list[_Op]:
        """A run of queued appends up to the caps, or one other operation (as a
        private writer takes them: each non-append op completes in its own round,
        after the appends before it). Caller holds the writer's cond."""
        opts = self.options
        ops = self._ops
        if not ops:
            return []
        first = ops.popleft()
        if first.kind != _APPEND:
            return [first]
        batch = [first]
        n, size = len(first.entries), first.nbytes
        while ops and ops[0].kind == _APPEND:
            nxt = ops[0]
            if (
                n + len(nxt.entries) > opts.queue_max_batch_entries
                or size + nxt.nbytes > opts.queue_max_batch_bytes
            ):
                break
            batch.append(ops.popleft())
            n += len(nxt.entries)
            size += nxt.nbytes
        return batch

    def _write_cache_wait(self) -> float | None:
        if not self.options.write_caching or self._unsynced_since is None:
            return None
        due = self._unsynced_since + self.options.write_cache_max_ms / 1000
        return max(0.0, due - time.monotonic())

    def _write_cache_due(self) -> bool:
        return self._unsynced_since is not None and (self._write_cache_wait() or 0.0) <= 0.0

    def _unsynced_cached(self) -> bool:
        return self._unsynced_since is not None and self._failed is None

    _unsynced_since: float | None = None
    _unsynced_bytes: int = 0

    def _write_round(self, ops: list[_Op]) -> list[_Op]:
        """Run ops in order (appends written, not yet synced); the ops that succeeded."""
        self._failed_now = []
        if self._failed is not None:
            self._failed_now = ops
            return []
        t0 = time.perf_counter()
        store = self.store
        done: list[_Op] = []
        run: list[_Op] = []  # consecutive appends, written with one write
        if len(ops) == 1 and ops[0].kind == _HARD_STATE:
            try:
                self._sync_store()  # the appends before it are synced first
            except BaseException as exc:
                self._failed = exc
                log.error("storage.disk_queue_failed dir=%s error=%r", store.directory, exc)
                self._failed_now = list(ops)
                return []
            self._staged_hs = ops[0]
            return []
        try:
            for op in ops:
                if op.kind == _APPEND:
                    run.append(op)
                    continue
                if run:
                    self._write_appends(run)
                    done.extend(run)
                    run = []
                # Everything before a non-append op is synced first (as with a
                # private writer): a commit checkpoint never gets ahead of the log.
                if op.kind != _CLOSE:
                    self._sync_store()
                kind = op.kind
                if kind == _TRUNCATE_SUFFIX:
                    store.truncate_suffix(op.arg)
                elif kind == _TRUNCATE_PREFIX:
                    # The file and index-row deletes go to the releaser thread: the
                    # appends behind this op must not wait for them (soak: 250-300 ms).
                    store.truncate_prefix(op.arg, release_later=True)
                elif kind == _RESET:
                    store.reset(*op.arg)
                elif kind == _HARD_STATE:
                    store.save_hard_state(*op.arg)
                elif kind == _SNAPSHOT:
                    store.save_snapshot_meta(op.arg)
                elif kind == _SYNC:
                    self._sync_store(force=True)
                elif kind == _CLOSE:
                    self._sync_store(force=True)
                    store.close()
                done.append(op)
            if run:
                self._write_appends(run)
                done.extend(run)
        except BaseException as exc:  # a failed write stops this queue for good
            self._failed = exc
            log.error("storage.disk_queue_failed dir=%s error=%r", store.directory, exc)
            self._failed_now = [op for op in ops if op not in done]
            # The appends of `done` were written but their sync never ran.
            self._failed_now.extend(op for op in done if op.kind == _APPEND)
            done = [op for op in done if op.kind != _APPEND]
        self.stats.write_seconds += time.perf_counter() - t0
        return done

    @property
    def writer_stats(self) -> WriterStats:
        """The counters of the writer thread serving this queue (shared or private)."""
        return self._writer.stats

    def _write_appends(self, batch: list[_Op]) -> None:
        entries = [e for op in batch for e in op.entries]
        self.store.append(entries, sync=False)
        self._dirty = True
        if self.options.write_caching:
            if self._unsynced_since is None:
                self._unsynced_since = time.monotonic()
            self._unsynced_bytes += sum(op.nbytes for op in batch)
        st = self.stats
        st.batches += 1
        st.batched_ops += len(batch)
        st.max_batch_entries = max(st.max_batch_entries, len(entries))

    def _sync_round(self, force: bool = False) -> int:
        """The writer's fsync round for this queue: the number of files synced.
        A failure fails the queue (its appends of the round are then failed)."""
        if self._failed is not None:
            return 0
        try:
            return self._sync_store(force)
        except BaseException as exc:
            self._failed = exc
            log.error("storage.disk_queue_failed dir=%s error=%r", self.store.directory, exc)
            return 0

    def _sync_store(self, force: bool = False) -> int:
        """fdatasync what this queue wrote (write caching: only when due or forced)."""
        if not self._dirty and self._unsynced_since is None:
            return 0
        opts = self.options
        if (
            opts.write_caching
            and not force
            and (self._unsynced_bytes < opts.write_cache_max_bytes and not self._write_cache_due())
        ):
            return 0
        before = self.store.stats.syncs
        self.store.sync()
        self._dirty = False
        self._unsynced_since = None
        self._unsynced_bytes = 0
        return self.store.stats.syncs - before

    # ------------------------------------------------------- loop callbacks

    def _complete_round(self, done: list[_Op], failed: list[_Op]) -> None:
        """On the loop: complete the round's successful ops (`done`), fail `failed`
        (the round's failed ops, taken from _failed_now by the writer thread)."""
        if self._failed is not None:
            # Appends are only durable after the fsync round: if the queue
            # failed in the round (write or sync), none of them is vouched for.
            failed = failed + [op for op in done if op.kind == _APPEND]
            done = [op for op in done if op.kind != _APPEND]
            if done:
                self._complete_ops(done)
            if failed:
                self._fail_ops(failed, self._failed)
            return
        self._complete_ops(done)

    def _complete_ops(self, batch: list[_Op]) -> None:
        for op in batch:
            if op.kind == _APPEND:
                last = op.entries[-1].index
                self.durable_index = max(self.durable_index, min(last, op.cap))
                self._pending_bytes -= op.nbytes
                self._inflight.popleft()
                result: object = last
            else:
                result = None
            if not op.future.done():
                op.future.set_result(result)
        if self._pending_bytes <= self.options.queue_max_pending_bytes:
            self._space.set()
        self._trim_tail()

    def _fail_ops(self, batch: list[_Op], exc: BaseException) -> None:
        err = StorageClosedError(f"disk queue failed: {exc!r}")
        err.__cause__ = exc
        for op in batch:
            if op.kind == _APPEND:
                self._pending_bytes -= op.nbytes
                self._inflight.popleft()
            if not op.future.done():
                op.future.set_exception(err)
        self._space.set()
