import random

import pytest

from connectors.spark.planning import OffsetRange, plan_ranges, rate_limit, split_range

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def covered(ranges):
    out = {}
    for r in ranges:
        out.setdefault((r.topic, r.partition), []).append((r.start, r.end))
    return out


def test_one_range_per_partition_sorted():
    ranges = plan_ranges({B0: 5, A1: 0, A0: 10}, {B0: 9, A1: 0, A0: 20})
    assert ranges == [OffsetRange("a", 0, 10, 20), OffsetRange("b", 0, 5, 9)]


def test_unresolved_new_and_deleted_partitions_read_nothing():
    ranges = plan_ranges({A0: -1, B0: 3}, {A0: 50, A1: 7})
    assert ranges == []  # A0 unresolved, A1 new (enters at 7), B0 gone from end


def test_backwards_raises():
    with pytest.raises(ValueError, match="backwards"):
        plan_ranges({A0: 10}, {A0: 9})


def test_min_partitions_splits_proportionally_and_exactly():
    ranges = plan_ranges({A0: 0, B0: 0}, {A0: 900, B0: 100}, min_partitions=10)
    cov = covered(ranges)
    assert len(cov[A0]) == 9 and len(cov[B0]) == 1
    for spans in cov.values():  # contiguous, no overlap
        assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    assert sum(r.size for r in ranges) == 1000


def test_max_records_per_partition():
    ranges = plan_ranges({A0: 0}, {A0: 1001}, max_records_per_partition=250)
    assert [r.size for r in ranges] == [201, 200, 200, 200, 200]
    assert split_range(OffsetRange("a", 0, 0, 2), 5) == [
        OffsetRange("a", 0, 0, 1),
        OffsetRange("a", 0, 1, 2),
    ]


def test_rate_limit_properties():
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    for _ in range(500):
        tps = [("t", p) for p in range(rng.randint(1, 6))]
        start = {tp: rng.randrange(100) for tp in tps}
        avail = {tp: start[tp] + rng.choice([0, 0, 1, 3, 50, 1000]) for tp in tps}
        limit = rng.randint(1, 2000)
        end = rate_limit(start, avail, limit)
        total = sum(avail[tp] - start[tp] for tp in tps)
        admitted = sum(end[tp] - start[tp] for tp in tps)
        assert admitted == min(limit, total)
        assert all(start[tp] <= end[tp] <= avail[tp] for tp in tps)
        assert end == rate_limit(dict(reversed(start.items())), avail, limit)  # deterministic


def test_rate_limit_is_proportional():
    end = rate_limit({A0: 0, B0: 0}, {A0: 3000, B0: 1000}, 400)
    assert end == {A0: 300, B0: 100}
