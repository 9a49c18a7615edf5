"""RoutedReads.read_index_partitions: a linearizable read also lifts the catch-up gate of a
replica that started empty, once its read index is applied, and waits for what this node
was placed on but has not applied or started yet (sink/node/routed_reads.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from sink.node.routed_reads import RoutedReads


class _Group:
    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.reads = 0

    async def read_index(self, timeout: float | None = None) -> int:
        self.reads += 1
        if self.fails:
            raise TimeoutError("no leader")
        return 7


def _hosted(serves: bool, fails: bool = False, caught_up: bool | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        group=_Group(fails),
        caught_up=serves if caught_up is None else caught_up,
        serves=lambda: serves,
    )


class _Groups:
    """by_partition: (topic, partition) -> a hosted group, or ("starting", gid, h): placed
    here, h hosted once wait_hosted is called."""

    node_id = 1

    def __init__(self, by_partition: dict) -> None:
        self.by_partition = by_partition
        self.marked: list = []
        self.woken = 0
        self.waited: list[int] = []
        self.starting: dict[int, SimpleNamespace] = {}

    def lookup(self, topic: str, partition: int):
        h = self.by_partition.get((topic, partition))
        if isinstance(h, tuple):
            _, gid, later = h
            self.starting[gid] = later
            return SimpleNamespace(group=gid, members=(1, 2, 3)), None
        return (SimpleNamespace(group=0, members=(1,)) if h else None), h

    def wake(self) -> None:
        self.woken += 1

    async def wait_hosted(self, gid: int, timeout: float):
        self.waited.append(gid)
        return self.starting.get(gid)

    def mark_caught_up(self, h) -> None:
        self.marked.append(h)


def test_a_gated_replica_serves_after_a_linearizable_read_and_a_failing_one_stays_gated():
    served, gated, stuck = _hosted(True), _hosted(False), _hosted(False, fails=True)
    groups = _Groups({("t", 0): served, ("t", 1): gated, ("t", 2): stuck})
    reads = RoutedReads(SimpleNamespace(), groups)  # type: ignore[arg-type]
    asyncio.run(reads.read_index_partitions([("t", 0), ("t", 1), ("t", 2), ("t", 9)]))
    assert [h.group.reads for h in (served, gated, stuck)] == [1, 1, 1]
    assert groups.marked == [gated]  # the stuck one answers -1 as before, no error


def test_a_served_group_that_cannot_confirm_fails_the_read():
    groups = _Groups({("t", 0): _hosted(True, fails=True), ("t", 1): _hosted(False)})
    reads = RoutedReads(SimpleNamespace(), groups)  # type: ignore[arg-type]
    with pytest.raises(TimeoutError):
        asyncio.run(reads.read_index_partitions([("t", 0), ("t", 1)]))


def test_a_replica_whose_serve_is_not_applied_yet_reads_its_index_first():
    """Past its catch-up gate, SERVE committed (the producer's records after it) but not
    applied here: the read index is what makes it apply SERVE and the records."""
    behind = _hosted(False, caught_up=True)
    groups = _Groups({("t", 0): behind})
    reads = RoutedReads(SimpleNamespace(), groups)  # type: ignore[arg-type]
    asyncio.run(reads.read_index_partitions([("t", 0)]))
    assert behind.group.reads == 1


def test_a_group_placed_here_but_not_started_is_waited_for_then_read():
    later = _hosted(False)
    groups = _Groups({("t", 0): ("starting", 5, later), ("t", 1): ("starting", 5, later)})
    reads = RoutedReads(SimpleNamespace(), groups)  # type: ignore[arg-type]
    asyncio.run(reads.read_index_partitions([("t", 0), ("t", 1)]))
    assert groups.woken == 1 and groups.waited == [5]
    assert later.group.reads == 1 and groups.marked == [later]


def test_wait_hosted_returns_the_group_once_started_or_none_at_the_deadline():
    """DataGroups.wait_hosted: what read_index_partitions waits on for a group placed here
    that reconcile has not started yet (the start resolves every waiter)."""
    from sink.node.data_groups import DataGroups

    async def main():
        groups = DataGroups(
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            node_id=1,
            raft_address=lambda n: None,
            options=None,  # type: ignore[arg-type]
            defaults=None,  # type: ignore[arg-type]
            retention_interval_s=1.0,
        )
        assert await groups.wait_hosted(7, 0.01) is None
        assert not groups._hosted_waiters  # a timed-out waiter is forgotten
        waiting = asyncio.ensure_future(groups.wait_hosted(7, 5.0))
        await asyncio.sleep(0)  # the waiter registers
        hosted = SimpleNamespace(placement=SimpleNamespace(group=7))
        groups._host(hosted)  # type: ignore[arg-type]  # _start_group, once it hosts
        assert await waiting is hosted and not groups._hosted_waiters
        assert await groups.wait_hosted(7, 0.01) is hosted  # already hosted: at once

    asyncio.run(main())
