"""DiskQueue: group commit, ordering, the in-memory tail, back-pressure, failures."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from raftlog.entry import HardState, SnapshotMeta
from raftlog.storage import DiskQueue, LogStore, StorageClosedError, StorageOptions
from tests.helpers.storage import entries


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def open_queue(tmp_path, **opts) -> DiskQueue:
    store = LogStore.open(str(tmp_path / "q"), StorageOptions(**opts))
    return DiskQueue(store)


def test_concurrent_appends_share_fsyncs(tmp_path):
    async def main():
        q = open_queue(tmp_path)
        gate = threading.Event()
        real_append = q.store.append

        def held_append(batch, sync=True):
            gate.wait(10)  # hold the writer so submissions pile up behind it
            return real_append(batch, sync)

        q.store.append = held_append
        futs = [q.append(entries(i, 1)) for i in range(1, 201)]
        assert q.last_index() == 200
        gate.set()
        results = await asyncio.gather(*futs)
        assert results == list(range(1, 201))
        assert q.durable_index == 200
        # The first append may go alone; the other 199 were queued while it
        # ran and go in one write + one fdatasync.
        assert q.stats.batches <= 2
        assert q.store.stats.syncs <= 2
        await q.close()
        s = LogStore.open(str(tmp_path / "q"))
        assert s.last_index() == 200
        s.close()

    run(main())


def test_tail_is_readable_before_durable_and_trimmed_after_apply(tmp_path):
    async def main():
        q = open_queue(tmp_path)
        gate = threading.Event()
        real_append = q.store.append
        q.store.append = lambda b, sync=True: (gate.wait(10), real_append(b, sync))
        fut = q.append(entries(1, 5))
        # Not durable yet, but readable at once (leader sends before its fsync).
        assert [e.index for e in q.read(1, 10, 10**9)] == [1, 2, 3, 4, 5]
        assert q.term_at(5) == 1 and q.durable_index == 0
        gate.set()
        await fut
        assert q.durable_index == 5 and q.tail_length == 5
        q.set_applied(3)
        assert q.tail_length == 2
        # Entries that left the tail come from the store.
        assert [e.index for e in q.read(1, 10, 10**9)] == [1, 2, 3, 4, 5]
        await q.close()

    run(main())


def test_truncation_is_ordered_with_appends(tmp_path):
    async def main():
        q = open_queue(tmp_path)
        f1 = q.append(entries(1, 10, term=1))
        f2 = q.truncate_suffix(6)
        assert q.last_index() == 5
        f3 = q.append(entries(6, 3, term=2))
        await asyncio.gather(f1, f2, f3)
        got = q.read(1, 100, 10**9)
        assert [(e.index, e.term) for e in got] == [(i, 1) for i in range(1, 6)] + [
            (6, 2),
            (7, 2),
            (8, 2),
        ]
        await q.close()
        s = LogStore.open(str(tmp_path / "q"))
        assert [(e.index, e.term) for e in s.read(1, 100, 10**9)] == [
            (e.index, e.term) for e in got
        ]
        s.close()

    run(main())


def test_late_completion_never_vouches_for_replaced_entries(tmp_path):
    async def main():
        q = open_queue(tmp_path)
        gate, hold_truncate = threading.Event(), threading.Event()
        real_append, real_truncate = q.store.append, q.store.truncate_suffix
        q.store.append = lambda b, sync=True: (gate.wait(10), real_append(b, sync))
        q.store.truncate_suffix = lambda i: (hold_truncate.wait(10), real_truncate(i))
        old = q.append(entries(1, 10, term=1))
        q.truncate_suffix(4)
        new = q.append(entries(4, 7, term=2))  # 4..10 again, in a new term
        gate.set()
        await old
        # Entries 4..10 of term 1 are durable but replaced: the completion of
        # the old batch vouches only for 1..3, never for the new 4..10.
        assert q.durable_index == 3 and not new.done()
        hold_truncate.set()
        await new
        assert q.durable_index == 10
        await q.close()

    run(main())


def test_hard_state_prefix_and_reset_go_through_the_queue(tmp_path):
    async def main():
        q = open_queue(tmp_path)
        q.append(entries(1, 20))
        await q.save_hard_state(HardState(4, 2, 10))
        await q.truncate_prefix(10)
        assert q.first_index() == 11
        await q.reset(101, SnapshotMeta(100, 5, b""))
        assert (q.first_index(), q.last_index(), q.last_term()) == (101, 100, 5)
        await q.append(entries(101, 2, term=5))
        await q.close()
        s = LogStore.open(str(tmp_path / "q"))
        assert s.hard_state() == HardState(4, 2, 10)
        assert (s.first_index(), s.last_index()) == (101, 102)
        s.close()

    run(main())


def test_back_pressure_waits_for_space(tmp_path):
    async def main():
        q = open_queue(tmp_path, queue_max_pending_bytes=1000, queue_max_batch_bytes=1000)
        gate = threading.Event()
        real_append = q.store.append
        q.store.append = lambda b, sync=True: (gate.wait(10), real_append(b, sync))
        q.append(entries(1, 20, size=100))  # 2000 bytes pending > 1000
        waiter = asyncio.ensure_future(q.wait_for_space())
        await asyncio.sleep(0)
        assert not waiter.done() and q.pending_bytes == 2000
        gate.set()
        await waiter
        assert q.pending_bytes == 0
        await q.close()

    run(main())


def test_write_failure_fails_futures_and_stops_the_queue(tmp_path, monkeypatch):
    async def main():
        q = open_queue(tmp_path)
        await q.append(entries(1, 2))

        def enospc(*_a):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "pwritev", enospc)
        with pytest.raises(StorageClosedError, match="No space left"):
            await q.append(entries(3, 1))
        monkeypatch.undo()
        with pytest.raises(StorageClosedError):
            await q.append(entries(4, 1))
        await q._writer.close()  # the queue's private writer thread
        q.store._release()

    run(main())


def test_write_caching_completes_before_sync_and_syncs_on_demand(tmp_path):
    async def main():
        q = open_queue(tmp_path, write_caching=True, write_cache_max_ms=60_000)
        syncs_before = q.store.stats.syncs
        await q.append(entries(1, 50))
        assert q.store.stats.syncs == syncs_before  # acknowledged from the page cache
        await q.sync()
        assert q.store.stats.syncs > syncs_before
        await q.close()

    run(main())


def test_closed_queue_rejects_submissions(tmp_path):
    async def main():
        q = open_queue(tmp_path)
        await q.close()
        with pytest.raises(StorageClosedError):
            await q.append(entries(1, 1))

    run(main())
