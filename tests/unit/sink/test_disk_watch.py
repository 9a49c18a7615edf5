"""DiskWatch (the node's decisions below its disk reserve), the storage-failure errno,
and the disk gauges on /metrics. The disk itself is faked here; the real one is in
tests/integration/test_disk_full.py (tmpfs volumes)."""

from __future__ import annotations

import asyncio
import errno
import logging
from types import SimpleNamespace

from prometheus_client import generate_latest

from raftlog.storage import DiskGuard, StorageClosedError
from raftlog.transport import TransportStats
from sink.metrics import NodeCollector, make_registry
from sink.node import DiskWatch, storage_errno

MiB = 1 << 20


class FakeDisk:
    def __init__(self, free: int) -> None:
        self.free = free

    def __call__(self, path: str) -> SimpleNamespace:
        return SimpleNamespace(
            f_blocks=(1 << 30) // 4096, f_bavail=self.free // 4096, f_frsize=4096
        )


def make_watch(disk: FakeDisk, node=None) -> DiskWatch:
    guard = DiskGuard(
        ["/data"], reserve_bytes=100 * MiB, reserve_percent=0, statvfs=disk, device_of=lambda p: 1
    )
    return DiskWatch(guard, 7, interval_s=0.01, node=node, handoff_every_s=0.0)


def test_writes_are_admitted_until_the_reserve_then_refused_and_logged(caplog):
    disk = FakeDisk(300 * MiB)
    watch = make_watch(disk)
    caplog.set_level(logging.WARNING, "sink.disk")
    assert watch.admit_write(150 * MiB)
    disk.free = 90 * MiB
    assert watch.admit_write(100 * MiB)  # this one was admitted; its bytes crossed
    assert not watch.admit_write(1)
    assert watch.refused_writes == 1
    assert watch.appends_allowed() and not watch.accepts_leadership()
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("disk.reserve_reached node=7 dir=/data free=94.4MB reserve=104.9MB")
    assert "KAFKA_STORAGE_ERROR" in line and "no restart" in line


def test_the_watch_loop_sees_space_return_and_half_the_reserve(caplog):
    disk = FakeDisk(40 * MiB)
    caplog.set_level(logging.WARNING, "sink.disk")

    async def main() -> None:
        watch = make_watch(disk)
        assert not watch.appends_allowed()  # read at construction
        watch.start()
        disk.free = 500 * MiB
        deadline = asyncio.get_running_loop().time() + 5
        while not watch.accepts_leadership():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        assert watch.admit_write(1)
        await watch.stop()

    asyncio.run(main())
    msgs = [r.getMessage().split(" ")[0] for r in caplog.records]
    assert msgs == ["disk.appends_refused", "disk.space_returned"]


def test_a_leader_below_the_reserve_hands_leadership_to_its_best_follower():
    calls: list[int] = []

    class Leader:
        options = SimpleNamespace(election_ticks=10, tick_ms=10)

        def is_leader(self) -> bool:
            return not calls

        def status(self) -> dict:
            return {"followers": {2: {"match": 10}, 3: {"match": 12}}}

        async def transfer_leader(self, target: int, timeout: float) -> None:
            calls.append(target)

    async def main() -> DiskWatch:
        watch = make_watch(FakeDisk(90 * MiB), node=Leader())
        watch.start()
        deadline = asyncio.get_running_loop().time() + 5
        while watch.handoffs == 0:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await watch.stop()
        return watch

    watch = asyncio.run(main())
    assert calls == [3]  # the most caught-up follower, once (then no longer leader)
    assert watch.handoffs == 1


def test_below_the_reserve_every_group_led_here_is_handed_off():
    """Partition groups: the controller and each data group on this host share the disk;
    a data group still led by the full node would take no record (its produce is
    refused), so each one led here moves to its own best follower."""
    calls: list[tuple[int, int]] = []

    class Group:
        options = SimpleNamespace(election_ticks=10, tick_ms=10)

        def __init__(self, gid: int, leads: bool, followers: dict[int, int]) -> None:
            self.group_id, self.leads, self.followers = gid, leads, followers

        def is_leader(self) -> bool:
            return self.leads

        def status(self) -> dict:
            return {"followers": {n: {"match": m} for n, m in self.followers.items()}}

        async def transfer_leader(self, target: int, timeout: float) -> None:
            calls.append((self.group_id, target))
            self.leads = False

    groups = [Group(0, True, {2: 5, 3: 4}), Group(4, True, {3: 9, 2: 1}), Group(5, False, {2: 1})]

    async def main() -> DiskWatch:
        watch = make_watch(FakeDisk(90 * MiB), node=groups[0])
        watch.groups_of = lambda: groups
        watch.start()
        deadline = asyncio.get_running_loop().time() + 5
        while watch.handoffs < 2:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await watch.stop()
        return watch

    watch = asyncio.run(main())
    assert sorted(calls) == [(0, 2), (4, 3)]  # each to its most caught-up follower, once
    assert watch.handoffs == 2


def test_storage_errno_reads_oserrors_lmdb_messages_and_causes():
    assert storage_errno(OSError(errno.ENOSPC, "No space left on device")) == errno.ENOSPC
    lmdb_like = Exception("mdb_txn_commit: No space left on device")
    assert storage_errno(lmdb_like) == errno.ENOSPC
    wrapped = StorageClosedError("disk queue failed")
    wrapped.__cause__ = OSError(errno.EIO, "Input/output error")
    assert storage_errno(wrapped) == errno.EIO
    assert storage_errno(ValueError("a bug")) is None


def test_metrics_show_free_bytes_per_volume_and_the_guard():
    watch = make_watch(FakeDisk(90 * MiB))
    node = SimpleNamespace(
        status=lambda: {
            "id": 7,
            "term": 1,
            "role": "leader",
            "leader": 7,
            "commit": 0,
            "applied": 0,
            "last_index": 0,
            "durable_index": 0,
            "pending_proposals": 0,
        }
    )
    transport = SimpleNamespace(stats=TransportStats())
    text = generate_latest(
        make_registry(NodeCollector(node, transport, watch.counters, gauges=watch.gauges))
    ).decode()
    assert 'raftsink_disk_free_bytes{dir="/data",node="7"} 9.437184e+07' in text
    assert 'raftsink_disk_reserve_bytes{dir="/data",node="7"} 1.048576e+08' in text
    assert 'raftsink_disk_guard_tripped{node="7"} 1.0' in text
    assert 'raftsink_disk_appends_refused{node="7"} 0.0' in text


def test_stop_before_start_is_safe():
    asyncio.run(make_watch(FakeDisk(500 * MiB)).stop())
