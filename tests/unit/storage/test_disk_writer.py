"""DiskWriter: one writer thread, one round and one fsync round for the logs of many groups."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from raftlog.entry import HardState
from raftlog.storage import DiskQueue, DiskWriter, LogEnvironment, StorageClosedError
from tests.helpers.storage import entries


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_one_round_serves_the_appends_of_several_groups(tmp_path):
    async def main():
        env = LogEnvironment.open(str(tmp_path / "d"))
        w = DiskWriter()
        queues = {g: DiskQueue(env.open_log(g), writer=w) for g in (1, 2, 3, 4)}
        # Hold the writer's lock while submitting, so the four groups' appends are
        # queued before the thread can take any: one round must take them all.
        with w.cond:
            futs = [q.append(entries(1, 5 + g)) for g, q in queues.items()]
        assert await asyncio.gather(*futs) == [6, 7, 8, 9]
        assert w.stats.rounds == 1 and w.stats.max_round_groups == 4
        assert w.stats.syncs == 4  # one fdatasync per group file, in one fsync round
        # the round's duration, writes and fsyncs, is in the writer's histogram
        assert w.stats.round_seconds.count == 1
        assert 0 < w.stats.round_seconds.sum_s <= w.stats.busy_seconds + 1e-9
        assert queues[1].writer_stats is w.stats
        for g, q in queues.items():
            assert q.durable_index == 5 + g
            assert [e.index for e in q.read(1, 100, 1 << 20)] == list(range(1, 6 + g))
        for q in queues.values():
            await q.close()
        await w.close()
        env.close()

    run(main())


def test_a_failed_group_stops_alone(tmp_path):
    async def main():
        env = LogEnvironment.open(str(tmp_path / "d"))
        w = DiskWriter()
        q1, q2, q3 = (DiskQueue(env.open_log(g), writer=w) for g in (1, 2, 3))

        def enospc(*_a, **_k):
            raise OSError(28, "No space left on device")

        q2.store.append = enospc
        with w.cond:
            f1, f2, f3 = (
                q1.append(entries(1, 3)),
                q2.append(entries(1, 3)),
                q3.append(entries(1, 3)),
            )
        assert await f1 == 3 and await f3 == 3
        with pytest.raises(StorageClosedError, match="No space left"):
            await f2
        with pytest.raises(StorageClosedError):
            await q2.append(entries(4, 1))
        # The other groups carry on in later rounds.
        assert await q1.append(entries(4, 2)) == 5
        assert await q3.append(entries(4, 1)) == 4
        for q in (q1, q2, q3):
            await q.close()
        await w.close()
        env.close()

    run(main())


def test_a_failed_append_fails_even_when_the_next_round_ran_first(tmp_path):
    """A failed append's future fails although the writer thread ran the queue's next
    round (a hard state queued behind it) before the loop saw the first round's
    completion. Each round used to hand its failures over in one queue attribute that
    the next round reset: the append's future then never completed, its Ready's persist
    step waited forever, and a node out of disk space never stopped (CI)."""

    async def main():
        env = LogEnvironment.open(str(tmp_path / "d"))
        w = DiskWriter()
        q = DiskQueue(env.open_log(1), writer=w)

        def enospc(*_a, **_k):
            raise OSError(28, "No space left on device")

        q.store.append = enospc
        with w.cond:  # both queued before the thread takes any: two rounds, in order
            appended = q.append(entries(1, 3))
            saved = q.save_hard_state(HardState(term=1, vote=1, commit=0))
        # Block the loop until the thread finished both rounds, so that both
        # completions run after the second round reset the queue's round state.
        deadline = time.monotonic() + 30
        while w.stats.rounds < 2:
            assert time.monotonic() < deadline, "the writer never ran two rounds"
            time.sleep(0.001)
        for fut in (appended, saved):
            with pytest.raises(StorageClosedError, match="No space left"):
                await asyncio.wait_for(fut, 10)
        await q.close()
        await w.close()
        env.close()

    run(main())


_CHILD = r"""
import asyncio, sys
from raftlog.storage import DiskQueue, DiskWriter, LogEnvironment
from raftlog.entry import EntryType, LogEntry

async def main(root):
    env = LogEnvironment.open(root)
    w = DiskWriter()
    qs = {g: DiskQueue(env.open_log(g), writer=w) for g in (1, 2, 3)}
    n = 0
    while True:
        n += 1
        futs = [q.append([LogEntry(n, 1, EntryType.DATA, b"g%d-%d" % (g, n) * 50)])
                for g, q in qs.items()]
        await asyncio.gather(*futs)
        print(n, flush=True)

asyncio.run(main(sys.argv[1]))
"""


def test_every_group_recovers_its_durable_entries_after_kill_9(tmp_path):
    root = str(tmp_path / "d")
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, root], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    acked = 0
    try:
        for line in proc.stdout:
            acked = int(line)
            if acked >= 200:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert acked >= 200, "the child wrote nothing"
    env = LogEnvironment.open(root)
    try:
        for g in (1, 2, 3):
            log = env.open_log(g)
            # Every round acknowledged before the kill is durable in every group, and
            # each group holds only its own entries.
            assert log.last_index() >= acked
            got = log.read(1, acked, 1 << 30)
            assert [e.data for e in got] == [b"g%d-%d" % (g, n) * 50 for n in range(1, acked + 1)]
    finally:
        env.close()
    assert not os.path.exists(os.path.join(root, "groups", "4"))
