"""DiskWriter: one writer thread serving the DiskQueues of many Raft groups.

A round takes the pending operations of EVERY attached queue, writes each
group's appends to its own segment file (one write per group file), then runs
ONE fsync round over every file written in the round, then hands all the
completions back to the event loop with a single hop. This is the braft /
Dragonboat / TiKV idea of sharing the fsync across groups, with a log per
group (raftsink reads its log back by index, so it keeps per-group files; the
research note's c5 and bench/scale_host.py measure per-file against a journal).

Invariants:
- Operations of one queue run in submission order; a queue's non-append
  operation (truncation, hard state, snapshot meta) runs only after every
  earlier append of that queue is synced (unless write caching), exactly as
  with a private writer, so a commit checkpoint never gets ahead of the log.
- A failed operation fails its own queue for good (that group must restart
  and recover); the other queues of the round carry on.
- Every queue of a writer lives on the writer's event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raftlog.latency import LatencyHistogram
from raftlog.storage.log_store import LogStore

if TYPE_CHECKING:  # the queue module imports this one at run time
    from raftlog.storage.disk_queue import DiskQueue

log = logging.getLogger("raftlog.storage")


@dataclass(slots=True)
class WriterStats:
    """Counters of a writer thread; monotonic."""

    rounds: int = 0
    """Rounds that did any work (each ends with one fsync round)."""
    round_groups: int = 0
    """Sum over rounds of the queues served in the round."""
    max_round_groups: int = 0
    syncs: int = 0
    """Files fdatasync'ed by the fsync rounds (one per group file written)."""
    busy_seconds: float = 0.0
    round_seconds: LatencyHistogram = field(default_factory=LatencyHistogram)
    """How long each round took, writes and its fsync round (a commit waits for one
    on a majority): where a produce's tail comes from when the disk stalls."""


class DiskWriter:
    """The writer thread shared by DiskQueues on one event loop.

    Queues attach themselves (DiskQueue(store, writer=w)); close() waits for
    every queued operation and stops the thread. A DiskQueue created without a
    writer owns a private one (one group, the single-group node).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        name: str = "raftlog-disk",
        sync_threads: int = 16,
    ) -> None:
        """sync_threads: the fdatasyncs of one fsync round run on this many threads
        (fdatasync releases the GIL; bench/scale_host.py measures 1 vs 4 vs a journal)."""
        if sync_threads < 1:
            raise ValueError(f"sync_threads must be >= 1, got {sync_threads}")
        self.loop = loop or asyncio.get_running_loop()
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(sync_threads, thread_name_prefix=f"{name}-sync")
            if sync_threads > 1
            else None
        )
        self.stats = WriterStats()
        self.cond = threading.Condition()
        # Queues with operations waiting, in the order they became ready.
        self._ready: dict[DiskQueue, None] = {}
        self._caching: set[DiskQueue] = set()  # queues holding unsynced cached writes
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -------------------------------------------------- called by queues

    def notify(self, queue: DiskQueue) -> None:
        """queue has new operations (caller holds self.cond)."""
        self._ready[queue] = None
        self.cond.notify()

    @property
    def closed(self) -> bool:
        return self._closing

    async def close(self) -> None:
        """Finish everything queued, then stop the thread. Idempotent."""
        with self.cond:
            self._closing = True
            self.cond.notify()
        await asyncio.to_thread(self._thread.join)

    # ------------------------------------------------------ writer thread

    def _cache_wait(self) -> float | None:
        waits = [w for q in self._caching if (w := q._write_cache_wait()) is not None]
        return min(waits) if waits else None

    def _take(self) -> list[tuple[DiskQueue, list]]:
        with self.cond:
            while not self._ready and not self._closing:
                timeout = self._cache_wait()
                if not self.cond.wait(timeout):
                    break  # a cached write is due: flush it below
            work = [(q, q._take_ops()) for q in self._ready]
            self._ready.clear()
            for q, _ops in work:
                if q._ops:  # more than one round's caps: serve it again next round
                    self._ready[q] = None
            due = [q for q in self._caching if q._write_cache_due() and q not in self._ready]
        seen = {q for q, _ in work}
        work.extend((q, []) for q in due if q not in seen)
        return work

    def _run(self) -> None:
        while True:
            work = self._take()
            if not work:
                with self.cond:
                    if self._closing and not self._ready:
                        break
                continue
            t0 = time.perf_counter()
            written: list[tuple[DiskQueue, list]] = []
            for q, ops in work:
                done = q._write_round(ops)
                written.append((q, done))
            self._save_hard_states(written)
            # The fsync round: every group file written above, once (in parallel
            # when several groups wrote: each sync touches only its own queue).
            dirty = [q for q, _ in written if q._dirty]
            if self._pool is not None and len(dirty) > 1:
                syncs = sum(self._pool.map(_sync_one, dirty))
            else:
                syncs = sum(q._sync_round() for q in dirty)
            for q, _ in written:
                if q._unsynced_cached():
                    self._caching.add(q)
                else:
                    self._caching.discard(q)
            st = self.stats
            st.rounds += 1
            st.round_groups += len(written)
            st.max_round_groups = max(st.max_round_groups, len(written))
            st.syncs += syncs
            took = time.perf_counter() - t0
            st.busy_seconds += took
            st.round_seconds.observe(took)
            # Each round's failed ops travel with its completion: the loop may run it
            # after this thread has started the next round, which resets _failed_now
            # (reading the attribute there lost a failed append: its Ready's persist
            # step waited forever and the node never stopped on ENOSPC).
            finished = []
            for q, done in written:
                failed, q._failed_now = q._failed_now, []
                if done or failed:  # a staged hard state that failed sits in failed
                    finished.append((q, done, failed))
            if finished:
                self.loop.call_soon_threadsafe(_complete_all, finished)
        # Closing: flush what write caching still holds.
        for q in list(self._caching):
            q._sync_round(force=True)
        if self._pool is not None:
            self._pool.shutdown()

    def _save_hard_states(self, written: list[tuple[DiskQueue, list]]) -> None:
        """The round's hard states (term, vote, commit) of every group: one LMDB
        transaction and one sync per index environment (one per data directory),
        instead of one per group (elections of 1,000 groups need 1,000 of them)."""
        staged = [(q, done) for q, done in written if q._staged_hs is not None]
        if not staged:
            return
        by_env: dict[int, list[tuple[DiskQueue, list]]] = {}
        for q, done in staged:
            by_env.setdefault(q.store.index_key, []).append((q, done))
        for items in by_env.values():
            try:
                LogStore.save_hard_states([(q.store, q._staged_hs.arg[0]) for q, _ in items])
            except BaseException as exc:
                log.error("storage.hard_state_round_failed error=%r", exc)
                for q, _ in items:
                    q._failed = exc
                    q._failed_now.append(q._staged_hs)
                    q._staged_hs = None
                continue
            for q, done in items:
                done.append(q._staged_hs)
                q._staged_hs = None


def _sync_one(q: DiskQueue) -> int:
    return q._sync_round()


def _complete_all(finished: list[tuple[DiskQueue, list, list]]) -> None:
    for q, done, failed in finished:
        q._complete_round(done, failed)
