"""The read API's linearizable Partitions with partition groups: each partition's high
watermark is its data group's, so the read needs a ReadIndex on that group, not only on
the controller (found by the chaos campaign, seed 1604 on 5 nodes: a linearizable
Partitions from node 5, leading partition 3, answered 6508 after offset 6508 had been
acknowledged; docs/chaos.md). Fakes of the groups only (unit test)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from raftlog.runtime import RaftError
from sink.node.routed_reads import RoutedReads
from sink.readapi import read_api_pb2 as pb
from sink.readapi.server import ReadApiService
from sink.readapi.wire import ERR_NOT_LEADER, ERR_UNKNOWN_TOPIC_OR_PARTITION


class _Group:
    """A data group whose applied high watermark catches up only at its read point."""

    def __init__(self, hw: int, committed: int, fail: bool = False) -> None:
        self.hw, self.committed, self.fail = hw, committed, fail
        self.read_indexes = 0

    async def read_index(self, timeout: float | None = None) -> int:
        self.read_indexes += 1
        if self.fail:
            raise RaftError("no leader")
        self.hw = self.committed  # applied up to the read point
        return self.committed


class _Hosted:
    def __init__(self, group: _Group, served: bool = True) -> None:
        self.group, self.topic_id, self._served = group, "tid", served
        self.caught_up = (
            True  # not behind the catch-up gate: tests/unit/groups/test_routed_read_index.py
        )
        self.fsm = SimpleNamespace(
            high_watermark=lambda _tid, _p: group.hw,
            log_start_offset=lambda _tid, _p: 0,
            offset_for_timestamp=lambda _tid, _p, ts: SimpleNamespace(offset=ts, timestamp=ts),
        )

    def serves(self) -> bool:
        return self._served


class _Groups:
    def __init__(self, hosted: dict[int, _Hosted | None]) -> None:
        self.hosted = hosted

    def lookup(self, topic: str, partition: int):
        return None, self.hosted.get(partition)


class _Controller:
    def topics(self):
        return {"t": SimpleNamespace(partitions=4)}

    def has_partition(self, topic: str, partition: int) -> bool:
        return topic == "t" and 0 <= partition < 4


class _Node:
    leader_id, term = 1, 3

    def __init__(self) -> None:
        self.read_indexes = 0

    async def read_index(self) -> None:
        self.read_indexes += 1


class _Ctx:
    async def abort(self, code, details):
        raise AssertionError((code, details))


def _service(hosted: dict[int, _Hosted | None]) -> tuple[ReadApiService, _Node]:
    node = _Node()
    reads = RoutedReads(_Controller(), _Groups(hosted))  # type: ignore[arg-type]
    return ReadApiService(node, reads), node  # type: ignore[arg-type]


def _hws(reply: pb.PartitionsReply) -> dict[int, int]:
    return {p.partition: p.high_watermark for p in reply.partitions}


def test_linearizable_partitions_reads_each_data_group_at_its_read_point():
    shared = _Group(hw=10, committed=12)  # one group serving partitions 0 and 1
    lagging = _Group(hw=6508, committed=6509)
    hosted = {0: _Hosted(shared), 1: _Hosted(shared), 2: _Hosted(lagging), 3: None}
    svc, node = _service(hosted)
    req = pb.PartitionsRequest(topics=["t"], linearizable=False)
    assert _hws(asyncio.run(svc.partitions(req, _Ctx()))) == {0: 10, 1: 10, 2: 6508, 3: -1}
    assert shared.read_indexes == lagging.read_indexes == 0  # plain: applied state as is
    req = pb.PartitionsRequest(topics=["t"], linearizable=True)
    assert _hws(asyncio.run(svc.partitions(req, _Ctx()))) == {0: 12, 1: 12, 2: 6509, 3: -1}
    assert node.read_indexes == 1
    assert shared.read_indexes == 1 and lagging.read_indexes == 1  # once per group


def test_a_replica_not_serving_yet_gets_a_best_effort_read_point():
    """Its SERVE not applied here yet: the read index is what would apply it (and the
    records after it: CI, test_read_api_over_tls answered -1 after an acknowledged
    write); one that cannot confirm answers -1 without failing the read."""
    waiting = _Group(hw=0, committed=5, fail=True)
    svc, _ = _service({0: _Hosted(waiting, served=False)})
    req = pb.PartitionsRequest(topics=["t"], linearizable=True)
    assert _hws(asyncio.run(svc.partitions(req, _Ctx())))[0] == -1
    assert waiting.read_indexes == 1


def test_a_data_group_without_a_read_point_fails_the_linearizable_read():
    svc, _ = _service({0: _Hosted(_Group(hw=1, committed=2, fail=True))})
    req = pb.PartitionsRequest(topics=["t"], linearizable=True)
    with pytest.raises(AssertionError) as err:
        asyncio.run(svc.partitions(req, _Ctx()))
    code, details = err.value.args[0]
    assert code == grpc.StatusCode.UNAVAILABLE and "data group" in details


def test_timestamp_lookup_of_a_partition_not_served_here_fails_that_row_only():
    """A node with no replica of a partition answers its row NOT_LEADER (the Spark source
    asks another node for it); it aborted the whole call, so a lookup over partitions no
    single node holds (RF < nodes) could never be answered."""
    svc, _ = _service({0: _Hosted(_Group(1, 1)), 1: None, 2: _Hosted(_Group(1, 1), False)})
    req = pb.OffsetsForTimesRequest(
        queries=[pb.TimeQuery(topic="t", partition=p, timestamp=70 + p) for p in (0, 1, 2, 7)]
    )
    rows = asyncio.run(svc.offsets_for_times(req, _Ctx())).offsets
    assert [(r.partition, r.offset, r.error_code) for r in rows] == [
        (0, 70, 0),
        (1, -1, ERR_NOT_LEADER),
        (2, -1, ERR_NOT_LEADER),
        (7, -1, ERR_UNKNOWN_TOPIC_OR_PARTITION),
    ]
