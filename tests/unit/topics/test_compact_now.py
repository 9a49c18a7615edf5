"""The compact-now hook: the disk guard, while it refuses produce, runs retention at once
and asks the Raft node for a snapshot (sink.topics.worker)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from sink.topics.worker import RetentionWorker, snapshot_now
from tests.unit.sink.test_disk_watch import FakeDisk, MiB, make_watch
from tests.unit.topics.test_retention import Log


class Node(SimpleNamespace):
    def __init__(self, applied: int, has_snapshot_now: bool = True) -> None:
        super().__init__(applied=applied, snapshots=0)
        if has_snapshot_now:
            self.snapshot_now = self._snap

    def _snap(self) -> bool:
        self.snapshots += 1
        return True


def test_compact_now_moves_log_starts_and_requests_a_snapshot():
    log = Log()
    log.create("t", {"retention.ms": "1000"})
    for _ in range(4):
        log.produce("t", int(time.time() * 1000) - 3600_000)  # expired by the real clock
    node = Node(applied=log.index)
    worker = RetentionWorker(log.fsm, node, interval_s=60)
    worker.compact_now()
    assert log.fsm.log_start_offset("t", 0) == 4 and worker.removed_batches == 4
    assert worker.limit == log.index  # nothing retained: everything applied may go
    assert node.snapshots == 1 and worker.forced_snapshots == 1
    # Without raftlog's snapshot_now the hook still applies retention, and says it did not snapshot.
    assert snapshot_now(Node(applied=1, has_snapshot_now=False)) is False


def test_the_disk_guard_calls_the_hook_while_it_refuses_produce():
    calls: list[float] = []

    async def main() -> None:
        disk = FakeDisk(40 * MiB)
        watch = make_watch(disk)
        watch.on_refuse = lambda: calls.append(time.monotonic())
        watch.start()
        deadline = time.monotonic() + 30
        while len(calls) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        disk.free = 900 * MiB
        while watch.level.name != "OK" and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        seen = len(calls)
        await asyncio.sleep(0.1)  # a few more checks at OK: the hook is not called
        assert len(calls) == seen
        await watch.stop()

    asyncio.run(main())
    assert len(calls) >= 2


def test_data_groups_compact_now_reaches_every_hosted_group(caplog):
    """Partition groups share the node's disk: below the reserve every hosted data group
    compacts, and one that fails does not keep the others from it."""
    from sink.node.data_groups import DataGroups

    done: list[int] = []

    def worker(gid: int, fails: bool = False) -> SimpleNamespace:
        def compact_now() -> None:
            if fails:
                raise RuntimeError("boom")
            done.append(gid)

        return SimpleNamespace(retention=SimpleNamespace(compact_now=compact_now))

    groups = DataGroups.__new__(DataGroups)  # only `hosted` is read
    groups.hosted = {3: worker(3), 4: worker(4, fails=True), 5: worker(5)}
    groups.compact_now()
    assert done == [3, 5]
    assert "compact_now failed group=4" in caplog.text


def test_short_retention_is_checked_a_32nd_of_its_window_apart():
    # The check interval bounds how far past its window a topic's data stays on disk.
    log = Log()
    worker = RetentionWorker(log.fsm, Node(applied=0), interval_s=30)
    assert worker.interval() == 30  # no topic yet: the configured interval
    log.create("forever", {"retention.ms": "-1"})
    log.produce("forever", int(time.time() * 1000))
    assert worker.interval() == 30  # nothing expires: no reason to check more often
    log.create("week", {"retention.ms": str(7 * 86_400_000)})
    log.produce("week", int(time.time() * 1000))
    assert worker.interval() == 30  # a long window: the configured interval is finer
    log.create("short", {"retention.ms": "180000"})
    log.produce("short", int(time.time() * 1000))
    assert worker.interval() == 180 / 32  # 5.6 s for a 3-minute topic
    log.create("tiny", {"retention.ms": "1000"})
    log.produce("tiny", int(time.time() * 1000))
    assert worker.interval() == 1.0  # never more often than once a second by itself
    fast = RetentionWorker(log.fsm, Node(applied=0), interval_s=0.2)
    assert fast.interval() == 0.2  # unless the operator asked for it
