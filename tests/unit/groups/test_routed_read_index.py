"""RoutedReads.read_index_partitions: a linearizable read also lifts the catch-up gate of a
replica that started empty, once its read index is applied (sink/node/routed_reads.py)."""

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


def _hosted(serves: bool, fails: bool = False) -> SimpleNamespace:
    return SimpleNamespace(group=_Group(fails), caught_up=serves, serves=lambda: serves)


class _Groups:
    def __init__(self, by_partition: dict) -> None:
        self.by_partition = by_partition
        self.marked: list = []

    def lookup(self, topic: str, partition: int):
        h = self.by_partition.get((topic, partition))
        return (1 if h else None), h

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
