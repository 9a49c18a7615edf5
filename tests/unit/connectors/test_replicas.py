"""Reads per replica: each range is planned on a replica of its partition (a follower
first, then the leader), a reader passes over a replica that is down or behind (and does
not ask a dead one again on every fetch), and the records read are the same whichever
replicas serve them."""

from __future__ import annotations

import pytest

from connectors.spark.cluster import PartitionState, ReadCluster
from connectors.spark.fetch import read_range
from connectors.spark.options import parse_options
from connectors.spark.planning import OffsetRange, assign_replicas, plan_ranges, replica_order
from connectors.spark.stream import RaftsinkStreamReader
from sink.readapi import read_api_pb2 as pb
from tests.unit.connectors.fakes import FakeCluster, FakeLog, Rec

REPLICAS = ((1, "n1:7"), (2, "n2:7"), (3, "n3:7"))


def fill(log: FakeLog, n: int, per: int = 10, partition: int = 0) -> None:
    for b in range(n):
        log.append("t", partition, [Rec(None, f"{b}.{i}".encode(), 0) for i in range(per)])


def offsets(rbs) -> list[int]:
    return [o for rb in rbs for o in rb.column("offset").to_pylist()]


def test_followers_first_rotated_by_slot_then_the_leader():
    assert replica_order(2, REPLICAS, 0) == ("n1:7", "n3:7", "n2:7")
    assert replica_order(2, REPLICAS, 1) == ("n3:7", "n1:7", "n2:7")
    assert replica_order(2, REPLICAS, 2) == ("n1:7", "n3:7", "n2:7")
    # No leader known: every replica is a follower.
    assert replica_order(0, REPLICAS, 1) == ("n2:7", "n3:7", "n1:7")
    # Unknown addresses are left out (the reader falls back to the node list).
    assert replica_order(1, ((1, "n1:7"), (2, ""), (3, "n3:7")), 0) == ("n3:7", "n1:7")
    assert replica_order(1, (), 0) == ()
    # A single replica, the leader: it is the only choice.
    assert replica_order(1, ((1, "n1:7"),), 5) == ("n1:7",)


def test_assign_keeps_offsets_spreads_over_followers_and_is_deterministic():
    states = {
        ("t", p): PartitionState(0, 100, leader=(p % 3) + 1, replicas=REPLICAS) for p in range(3)
    }
    states[("u", 0)] = PartitionState(0, 100)  # an older node: no replicas
    start = {tp: 0 for tp in states}
    end = {tp: 100 for tp in states}
    ranges = plan_ranges(start, end, min_partitions=8)
    out = assign_replicas(ranges, states)
    assert [(r.topic, r.partition, r.start, r.end) for r in out] == [
        (r.topic, r.partition, r.start, r.end) for r in ranges
    ]
    assert out == assign_replicas(ranges, states)  # a re-planned batch: the same plan
    for r in out:
        st = states[(r.topic, r.partition)]
        if not st.replicas:
            assert r.replicas == ()
            continue
        leader = dict(st.replicas)[st.leader]
        assert r.replicas[-1] == leader and set(r.replicas) == {a for _, a in REPLICAS}
    first = {r.replicas[0] for r in out if r.replicas}
    assert len(first) == 3, f"the first choices do not spread: {first}"
    # A split range keeps its replicas.
    assert all(r.replicas for r in out if r.topic == "t")


def test_first_choices_spread_when_each_partition_has_its_own_leader():
    """Partition groups: partitions 0 and 1 led by nodes 1 and 3. Each partition's own
    rotation put both first on node 2 (followers (2, 3) at slot 0, (1, 2) at slot 1)."""
    states = {
        ("t", 0): PartitionState(0, 100, leader=1, replicas=REPLICAS),
        ("t", 1): PartitionState(0, 100, leader=3, replicas=REPLICAS),
    }
    ranges = plan_ranges({tp: 0 for tp in states}, {tp: 100 for tp in states}, min_partitions=2)
    out = assign_replicas(ranges, states)
    assert [r.replicas for r in out] == [("n2:7", "n3:7", "n1:7"), ("n1:7", "n2:7", "n3:7")]
    # Many ranges: every node is first for some (greedy in plan order: within 2 of each
    # other, where each partition's own rotation gave node 2 half of them), leaders last.
    many = assign_replicas(
        plan_ranges({tp: 0 for tp in states}, {tp: 100 for tp in states}, min_partitions=12),
        states,
    )
    firsts = [r.replicas[0] for r in many]
    counts = sorted(firsts.count(a) for a in {"n1:7", "n2:7", "n3:7"})
    assert len(many) == 12 and counts[0] >= 3 and counts[-1] - counts[0] <= 2, firsts
    assert all(r.replicas[-1] == ("n1:7" if r.partition == 0 else "n3:7") for r in many)


def test_reads_from_the_planned_follower_not_the_node_list_order():
    logs = {a: FakeLog() for a in ("n1:7", "n2:7", "n3:7")}
    for log in logs.values():
        fill(log, 5)
    cluster = FakeCluster(logs)
    rng = OffsetRange("t", 0, 0, 50, replicas=("n3:7", "n2:7", "n1:7"))
    assert offsets(read_range(cluster, rng, max_bytes=1)) == list(range(50))
    assert set(cluster.calls) == {"n3:7"}


def test_a_dead_replica_is_passed_over_once_then_the_next_one_serves_the_rest():
    logs: dict[str, FakeLog | None] = {a: FakeLog() for a in ("n1:7", "n2:7", "n3:7")}
    for log in logs.values():
        assert log is not None
        fill(log, 10)
    cluster = FakeCluster(logs)
    real = cluster.fetch

    def dies_after_three(address, *args):
        if address == "n3:7" and cluster.calls.count("n3:7") >= 3:
            cluster.logs["n3:7"] = None  # killed during the batch
        return real(address, *args)

    cluster.fetch = dies_after_three  # type: ignore[method-assign]
    rng = OffsetRange("t", 0, 0, 100, replicas=("n3:7", "n2:7", "n1:7"))
    assert offsets(read_range(cluster, rng, max_bytes=1)) == list(range(100))
    # n3 served 0..29 (the third call's prefetch failed), then n2 every later fetch: the
    # dead replica was not asked again.
    dead_calls = cluster.calls.count("n3:7")
    assert dead_calls <= 4, cluster.calls
    assert cluster.calls[-1] == "n2:7" and "n1:7" not in cluster.calls


def test_a_follower_behind_serves_what_it_has_and_the_leader_the_rest():
    behind, leader = FakeLog(), FakeLog()
    fill(behind, 4)  # applied up to 40
    fill(leader, 10)
    cluster = FakeCluster({"f:7": behind, "l:7": leader})
    rng = OffsetRange("t", 0, 0, 100, replicas=("f:7", "l:7"))
    assert offsets(read_range(cluster, rng, max_bytes=1)) == list(range(100))
    assert "f:7" in cluster.calls and cluster.calls[-1] == "l:7"


def test_replica_addresses_the_node_list_lacks_are_used_and_the_list_is_the_fallback():
    advertised, listed = FakeLog(), FakeLog()
    fill(advertised, 3)
    fill(listed, 3)
    cluster = FakeCluster({"listed:7": listed})
    cluster.logs["adv:7"] = advertised  # reachable, but not in raftsink.nodes
    rng = OffsetRange("t", 0, 0, 30, replicas=("adv:7",))
    assert offsets(read_range(cluster, rng)) == list(range(30))
    assert set(cluster.calls) == {"adv:7"}
    cluster.logs["adv:7"] = None
    cluster.calls.clear()
    assert offsets(read_range(cluster, rng)) == list(range(30))
    assert cluster.calls[0] == "adv:7" and cluster.calls[-1] == "listed:7"


def test_partitions_answer_carries_leader_and_replicas(monkeypatch):
    reply = pb.PartitionsReply(
        partitions=[
            pb.PartitionInfo(
                topic="t",
                partition=0,
                log_start_offset=3,
                high_watermark=9,
                leader_id=2,
                replicas=[pb.Replica(node_id=n, read_api=a) for n, a in REPLICAS],
            ),
            pb.PartitionInfo(topic="t", partition=1, high_watermark=4),
        ]
    )
    cluster = ReadCluster(["n1:7"])
    monkeypatch.setattr(cluster, "first_answer", lambda what, fn, deadline_s=None: reply)
    states = cluster.partitions(["t"])
    assert states[("t", 0)] == PartitionState(3, 9, 2, REPLICAS)
    assert states[("t", 1)] == PartitionState(0, 4, 0, ())


class _PlacedCluster(FakeCluster):
    def partitions(self, topics=None, linearizable=False, deadline_s=None):  # type: ignore[override]
        states = super().partitions(topics, linearizable, deadline_s)
        return {
            tp: PartitionState(s.log_start_offset, s.high_watermark, 1, REPLICAS)
            for tp, s in states.items()
        }


@pytest.mark.parametrize("replayed", [False, True])
def test_stream_reader_plans_ranges_on_replicas(replayed):
    log = FakeLog()
    fill(log, 2)
    r = RaftsinkStreamReader(
        parse_options({"raftsink.nodes": "n1:7", "subscribe": "t"}, streaming=True)
    )
    r._cluster = _PlacedCluster({"n1:7": log})
    start = {"t": {"0": 0}}
    # replayed: a batch Spark replays from its checkpoint after a restart (no latestOffset
    # before it in this run).
    end = {"t": {"0": 20}} if replayed else r.latestOffset(start, r.getDefaultReadLimit())
    (rng,) = r.partitions(start, end)
    assert (rng.start, rng.end) == (0, 20)
    assert rng.replicas == ("n2:7", "n3:7", "n1:7")
