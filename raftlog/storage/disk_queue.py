"""DiskQueue: braft's LogManager disk thread, in front of a LogStore.

Callers on the asyncio event loop submit operations and get futures; one
writer thread takes everything queued (up to a cap in entries and bytes),
writes it with one write and ONE fdatasync, then completes all of the batch's
futures with a single hop back to the loop. Truncations, resets and hard-state
saves go through the same queue, so they are ordered with the appends around
them exactly as submitted.

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
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raftlog.entry import HardState, LogEntry, SnapshotMeta
from raftlog.storage.errors import LogRangeError, StorageClosedError
from raftlog.storage.log_store import LogStore

log = logging.getLogger("raftlog.storage")

_APPEND, _TRUNCATE_SUFFIX, _TRUNCATE_PREFIX, _RESET, _HARD_STATE, _SNAPSHOT, _SYNC = range(7)


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

    def __init__(self, store: LogStore, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.store = store
        self.options = store.options
        self.stats = QueueStats()
        self._loop = loop or asyncio.get_running_loop()
        self._ops: collections.deque[_Op] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._failed: BaseException | None = None
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
        self._thread = threading.Thread(target=self._run, name="raftlog-disk", daemon=True)
        self._thread.start()

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
            op.future.set_exception(StorageClosedError(f"disk queue failed: {self._failed!r}"))
            return op.future
        if self._closing:
            op.future.set_exception(StorageClosedError("disk queue is closed"))
            return op.future
        with self._cond:
            self._ops.append(op)
            self._cond.notify()
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
        """Finish every queued operation, stop the writer thread, close the store."""
        if self._closing:
            return
        self._closing = True
        with self._cond:
            self._cond.notify()
        await asyncio.to_thread(self._thread.join)
        self.store.close()

    # ---------------------------------------------------------- writer thread

    def _take_batch(self) -> list[_Op]:
        """Everything queued up to the caps; a run of appends, or one other op."""
        opts = self.options
        with self._cond:
            while not self._ops and not self._closing:
                if not self._cond.wait(self._write_cache_wait()):
                    return []  # timed out: _run flushes the write cache if it is due
            if not self._ops:
                return []
            first = self._ops.popleft()
            if first.kind != _APPEND:
                return [first]
            batch = [first]
            n, size = len(first.entries), first.nbytes
            while self._ops and self._ops[0].kind == _APPEND:
                nxt = self._ops[0]
                if (
                    n + len(nxt.entries) > opts.queue_max_batch_entries
                    or size + nxt.nbytes > opts.queue_max_batch_bytes
                ):
                    break
                self._ops.popleft()
                batch.append(nxt)
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

    _unsynced_since: float | None = None
    _unsynced_bytes: int = 0

    def _run(self) -> None:
        store = self.store
        while True:
            batch = self._take_batch()
            if not batch:
                if self.options.write_caching and self._write_cache_due():
                    self._run_ops_safely([], self._flush_write_cache)
                    continue
                if self._closing and not self._ops:
                    if self._failed is None and self._unsynced_since is not None:
                        self._run_ops_safely([], self._flush_write_cache)
                    return
                continue
            if self._failed is not None:
                self._loop.call_soon_threadsafe(self._fail_ops, batch, self._failed)
                continue
            t0 = time.perf_counter()
            kind = batch[0].kind
            if kind == _APPEND:
                self._run_ops_safely(batch, self._write_appends, batch)
            elif kind == _TRUNCATE_SUFFIX:
                self._run_ops_safely(batch, store.truncate_suffix, batch[0].arg)
            elif kind == _TRUNCATE_PREFIX:
                self._run_ops_safely(batch, store.truncate_prefix, batch[0].arg)
            elif kind == _RESET:
                self._run_ops_safely(batch, store.reset, *batch[0].arg)
            elif kind == _HARD_STATE:
                self._run_ops_safely(batch, store.save_hard_state, *batch[0].arg)
            elif kind == _SNAPSHOT:
                self._run_ops_safely(batch, store.save_snapshot_meta, batch[0].arg)
            elif kind == _SYNC:
                self._run_ops_safely(batch, self._flush_write_cache)
            self.stats.write_seconds += time.perf_counter() - t0

    def _write_appends(self, batch: list[_Op]) -> None:
        entries = [e for op in batch for e in op.entries]
        caching = self.options.write_caching
        self.store.append(entries, sync=not caching)
        if caching:
            if self._unsynced_since is None:
                self._unsynced_since = time.monotonic()
            self._unsynced_bytes += sum(op.nbytes for op in batch)
            if self._unsynced_bytes >= self.options.write_cache_max_bytes:
                self._flush_write_cache()
        st = self.stats
        st.batches += 1
        st.batched_ops += len(batch)
        st.max_batch_entries = max(st.max_batch_entries, len(entries))

    def _flush_write_cache(self) -> None:
        self.store.sync()
        self._unsynced_since = None
        self._unsynced_bytes = 0

    def _run_ops_safely(self, batch: list[_Op], fn: Callable[..., object], *args: object) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # a failed write stops the queue for good
            self._failed = exc
            log.error("storage.disk_queue_failed error=%r", exc)
            self._loop.call_soon_threadsafe(self._fail_ops, batch, exc)
            return
        if batch:
            self._loop.call_soon_threadsafe(self._complete_ops, batch)

    # ------------------------------------------------------- loop callbacks

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
