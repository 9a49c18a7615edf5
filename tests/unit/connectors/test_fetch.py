"""read_range over fake replicas: failover, lagging replicas, data loss, short ranges."""

import pytest

from connectors.spark.errors import ClusterUnreachableError, DataLossError, OffsetOutOfRangeError
from connectors.spark.fetch import read_range
from connectors.spark.planning import OffsetRange
from tests.unit.connectors.fakes import FakeCluster, FakeLog, Rec

T0 = 1_700_000_000_000


def fill(log: FakeLog, batches: int, per: int = 10) -> None:
    for b in range(batches):
        log.append("t", 0, [Rec(b"k", f"{b}.{i}".encode(), T0 + i) for i in range(per)])


def offsets(rbs) -> list[int]:
    return [o for rb in rbs for o in rb.column("offset").to_pylist()]


def test_reads_exact_range_across_many_fetches():
    log = FakeLog()
    fill(log, 30)
    cluster = FakeCluster({"n1": log})
    rbs = list(read_range(cluster, OffsetRange("t", 0, 5, 295), max_bytes=1))
    assert offsets(rbs) == list(range(5, 295))
    # Every fetch after the first was started before the previous reply was decoded,
    # and none past the range's end.
    assert cluster.prefetches == 29 and len(cluster.calls) == 30


def test_failed_prefetch_falls_back_to_the_other_replicas():
    """The node serving the prefetch dies between two fetches: its error is one
    more failed attempt, and the range is still read whole from the other node."""
    a, b = FakeLog(), FakeLog()
    fill(a, 10)
    fill(b, 10)
    cluster = FakeCluster({"a": a, "b": b})
    real_fetch = cluster.fetch

    def dies_after_two(address, *args):
        if address == "a" and cluster.calls.count("a") >= 2:
            cluster.logs["a"] = None
        return real_fetch(address, *args)

    cluster.fetch = dies_after_two  # type: ignore[method-assign]
    rbs = list(read_range(cluster, OffsetRange("t", 0, 0, 100), max_bytes=1))
    assert offsets(rbs) == list(range(100))
    assert cluster.nodes[cluster.preferred] == "b" and "b" in cluster.calls


def test_fails_over_from_dead_and_lagging_nodes():
    full, lagging = FakeLog(), FakeLog()
    fill(full, 10)
    fill(lagging, 4)  # applied up to 40 only
    cluster = FakeCluster({"dead": None, "lag": lagging, "full": full})
    rbs = list(read_range(cluster, OffsetRange("t", 0, 0, 100), max_bytes=1))
    assert offsets(rbs) == list(range(100))
    assert "full" in cluster.calls and cluster.nodes[cluster.preferred] in ("lag", "full")


def test_unreachable_names_every_address():
    cluster = FakeCluster({"10.0.0.1:7": None, "10.0.0.2:7": None})
    with pytest.raises(ClusterUnreachableError, match=r"10\.0\.0\.1:7.*10\.0\.0\.2:7"):
        list(read_range(cluster, OffsetRange("t", 0, 0, 10)))


def test_range_beyond_every_replica_raises_not_short():
    log = FakeLog()
    fill(log, 2)
    cluster = FakeCluster({"n1": log})
    with pytest.raises(OffsetOutOfRangeError, match=r"\[20, 30\)"):
        list(read_range(cluster, OffsetRange("t", 0, 0, 30)))


def test_data_loss_raises_or_skips():
    log = FakeLog()
    fill(log, 10)
    log.truncate_prefix(("t", 0), 50)
    cluster = FakeCluster({"n1": log})
    with pytest.raises(DataLossError, match=r"\[10, 50\)"):
        list(read_range(cluster, OffsetRange("t", 0, 10, 80)))
    rbs = list(read_range(cluster, OffsetRange("t", 0, 10, 80), fail_on_data_loss=False))
    assert offsets(rbs) == list(range(50, 80))


def test_data_loss_only_when_no_replica_still_has_it():
    old, new = FakeLog(), FakeLog()
    fill(old, 10)
    fill(new, 10)
    new.truncate_prefix(("t", 0), 50)
    cluster = FakeCluster({"new": new, "old": old})
    assert offsets(read_range(cluster, OffsetRange("t", 0, 0, 60))) == list(range(60))
