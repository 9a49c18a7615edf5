"""ReadCluster with partition groups: a node knows only the offsets of the partitions it holds
a replica of (the others are listed with -1 offsets, sink.node.routed_reads.NOT_HERE), so
the source must take each partition's offsets from a node of ITS group, never a -1 high
watermark from whichever node answered first. Timestamp lookups likewise: a node without a
replica answers that row NOT_LEADER and another node answers it. Fakes of the read API
clients only (unit test); the real ReadCluster logic runs."""

from __future__ import annotations

import asyncio

import pytest

from connectors.spark.cluster import NOT_SERVED, ReadCluster
from connectors.spark.errors import ClusterUnreachableError
from sink.readapi import read_api_pb2 as pb
from sink.readapi.wire import ERR_NOT_LEADER

# 4 nodes, 4 partitions at RF 2: partition p on nodes p+1 and (p+1)%4+1.
ADDR = {n: f"n{n}:7" for n in range(1, 5)}
PLACED = {p: (p + 1, (p + 1) % 4 + 1) for p in range(4)}
HW = {p: 100 + p for p in range(4)}


class _Client:
    def __init__(self, node: int, log: list) -> None:
        self.node, self.log = node, log

    async def partitions(self, topics=None, linearizable=False, timeout=None):
        self.log.append((self.node, "partitions", linearizable))
        out = []
        for p, replicas in PLACED.items():
            here = self.node in replicas
            info = pb.PartitionInfo(
                topic="t",
                partition=p,
                log_start_offset=5 if here else NOT_SERVED,
                high_watermark=HW[p] if here else NOT_SERVED,
                leader_id=replicas[0],
                leader_epoch=2,
            )
            for r in replicas:
                info.replicas.add(node_id=r, read_api=ADDR[r])
            out.append(info)
        return pb.PartitionsReply(partitions=out)

    async def offsets_for_times(self, queries, timeout=None):
        self.log.append((self.node, "times", sorted(queries)))
        rows = []
        for (t, p), ts in queries.items():
            if self.node in PLACED[p]:
                rows.append(pb.TimeOffset(topic=t, partition=p, offset=ts // 10, timestamp=ts))
            else:
                rows.append(
                    pb.TimeOffset(
                        topic=t, partition=p, offset=-1, timestamp=-1, error_code=ERR_NOT_LEADER
                    )
                )
        return pb.OffsetsForTimesReply(offsets=rows)


class _Cluster(ReadCluster):
    """The real ReadCluster; call() runs fn on a fake client (dead: ConnectionError)."""

    def __init__(self, nodes: list[int], dead: set[int] = frozenset(), **kw) -> None:
        super().__init__([ADDR[n] for n in nodes], request_timeout_s=1.0, **kw)
        self.dead = set(dead)
        self.log: list = []

    def call(self, address, fn):  # type: ignore[override]
        node = int(address[1])
        if node in self.dead:
            self.log.append((node, "refused", None))
            raise ConnectionError(f"refused: {address}")
        return asyncio.run(fn(_Client(node, self.log)))


def test_each_partition_from_a_node_of_its_group():
    c = _Cluster([1, 2, 3, 4])
    states = c.partitions(["t"], linearizable=True)
    assert {tp: st.high_watermark for tp, st in states.items()} == {
        ("t", p): HW[p] for p in range(4)
    }
    assert all(st.log_start_offset == 5 and st.served for st in states.values())
    assert all(st.replicas for st in states.values())
    # Node 1 serves partitions 0 and 3; node 2 serves 1 (and 0): nodes 3 and 4 cover 2.
    asked = [n for n, what, lin in c.log if what == "partitions"]
    assert asked == [1, 2, 3]
    assert all(lin for _, what, lin in c.log if what == "partitions")  # each one linearizable


def test_unlisted_replicas_are_asked_and_dead_ones_passed_over():
    # The source lists node 1 only; partition 1 (nodes 2, 3) and 2 (nodes 3, 4) come from
    # the replica addresses the cluster names; node 2 is dead.
    c = _Cluster([1], dead={2})
    states = c.partitions(["t"])
    assert {tp[1]: st.high_watermark for tp, st in states.items()} == HW
    assert [(n, w) for n, w, _ in c.log] == [
        (1, "partitions"),
        (2, "refused"),
        (3, "partitions"),
    ]


def test_a_partition_no_node_serves_is_an_error_not_a_minus_one_offset():
    c = _Cluster([1, 2, 3, 4], dead={3, 4}, retry_timeout_s=0.3)
    with pytest.raises(ClusterUnreachableError, match="no node serves t/2"):
        c.partitions(["t"])


def test_timestamp_rows_from_the_nodes_that_serve_them():
    c = _Cluster([1, 2, 3, 4])
    queries = {("t", p): 1000 * (p + 1) for p in range(4)}
    assert c.offsets_for_times(queries) == {("t", p): 100 * (p + 1) for p in range(4)}
    # Node 1 answers 0 and 3; node 2 is asked the rest and answers 1; node 3 answers 2.
    assert [(n, q) for n, w, q in c.log] == [
        (1, [("t", 0), ("t", 1), ("t", 2), ("t", 3)]),
        (2, [("t", 1), ("t", 2)]),
        (3, [("t", 2)]),
    ]


def test_timestamp_rows_nobody_answers_fail_after_the_deadline():
    c = _Cluster([1], retry_timeout_s=0.2)
    with pytest.raises(ClusterUnreachableError, match="OffsetsForTimes"):
        c.offsets_for_times({("t", 1): 5})
