"""place_partitions: the hard rules (one replica per host, RF within live hosts, refusals
carrying Kafka's codes) on many random clusters, and the spread (preferred leaders within
one of each other per node, new nodes first)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from sink.placement import (
    NodeLoad,
    PlacementError,
    Topology,
    check_replication_factor,
    count_load,
    place_partitions,
)
from tests.unit.placement.seeds import seeded, uniform_hosts


def _spread(values: list[int]) -> int:
    return max(values) - min(values)


def test_random_clusters_keep_every_hard_rule_and_spread_preferred_leaders_evenly():
    rng = seeded("placer")
    for case in range(1500):
        hosts, _n_hosts = uniform_hosts(rng)
        dead = set(rng.sample(sorted(hosts), rng.randint(0, len(hosts) // 3)))
        topo = Topology.of(hosts, live=set(hosts) - dead)
        live_hosts = len(topo.live_hosts())
        rf = rng.randint(1, 5)
        partitions = rng.randint(1, 40)
        if rf > live_hosts:
            with pytest.raises(PlacementError) as err:
                place_partitions(topo, partitions, rf, topic=f"t{case}")
            assert err.value.code == ErrorCode.invalid_replication_factor
            continue
        out = place_partitions(topo, partitions, rf, topic=f"t{case}")
        assert len(out) == partitions, case
        for replicas in out:
            assert len(replicas) == rf
            assert len({topo.host_of(n) for n in replicas}) == rf, (case, hosts, replicas)
            assert not set(replicas) & dead, (case, replicas, dead)
        load = count_load(out)
        live = topo.live_nodes
        preferred = [load[n].preferred if n in load else 0 for n in live]
        assert _spread(preferred) <= 1, (case, hosts, dead, rf, out)
        assert sorted(preferred)[-1] == -(-partitions // len(live))  # ceil(P/N)
        if not dead:  # uniform hosts: replicas within two of each other per node
            replicas = [load[n].replicas if n in load else 0 for n in live]
            assert _spread(replicas) <= 2, (case, hosts, rf, out)


def test_an_empty_cluster_starts_at_the_stripe_and_ends_exactly_even():
    topo = Topology.of(range(1, 6))
    # The first partition takes consecutive hosts from the stripe's start (the seed;
    # default: the topic name's hash).
    assert place_partitions(topo, 1, 3, seed=0) == [(1, 2, 3)]
    assert place_partitions(topo, 1, 3, seed=2) == [(3, 4, 5)]
    # N partitions on N nodes: every node preferred leader of one, holding RF replicas.
    for rf in (1, 2, 3, 4, 5):
        load = count_load(place_partitions(topo, 5, rf, topic=f"even{rf}"))
        assert {n: (v.replicas, v.preferred) for n, v in load.items()} == {
            n: (rf, 1) for n in range(1, 6)
        }


def test_the_same_request_gives_the_same_answer_and_topics_start_apart():
    topo = Topology.of({n: f"h{(n + 1) // 2}" for n in range(1, 7)})
    a = place_partitions(topo, 12, 3, topic="orders")
    assert a == place_partitions(topo, 12, 3, topic="orders")
    firsts = {place_partitions(topo, 1, 3, topic=f"t{i}")[0][0] for i in range(20)}
    assert len(firsts) > 1  # the stripe's start depends on the topic name


@pytest.mark.parametrize(
    ("partitions", "rf", "code", "match"),
    [
        (3, 0, ErrorCode.invalid_replication_factor, "at least 1"),
        (3, -1, ErrorCode.invalid_replication_factor, "at least 1"),
        (3, 4, ErrorCode.invalid_replication_factor, "needs 4 distinct live hosts"),
        (0, 1, ErrorCode.invalid_partitions, "partition count"),
    ],
)
def test_refusals_carry_kafkas_error_code(partitions, rf, code, match):
    topo = Topology.of(range(1, 4))
    with pytest.raises(PlacementError, match=match) as err:
        place_partitions(topo, partitions, rf)
    assert err.value.code == code and int(code) in (37, 38)


def test_host_separation_counts_hosts_not_nodes():
    # Six processes on two machines: RF 3 cannot be honoured, and it is refused, not
    # placed with two replicas on one machine.
    topo = Topology.of({n: f"h{(n + 2) // 3}" for n in range(1, 7)})
    assert len(topo.live_hosts()) == 2
    with pytest.raises(PlacementError, match=r"2 \(h1: 1,2,3; h2: 4,5,6\)") as err:
        place_partitions(topo, 1, 3)
    assert err.value.code == ErrorCode.invalid_replication_factor
    out = place_partitions(topo, 6, 2, topic="x")
    assert all({topo.host_of(a), topo.host_of(b)} == {"h1", "h2"} for a, b in out)
    # Each of the six processes is the preferred leader of exactly one partition.
    assert sorted(r[0] for r in out) == [1, 2, 3, 4, 5, 6]


def test_dead_hosts_do_not_count_and_get_nothing():
    topo = Topology.of(range(1, 4), live={1, 2})
    with pytest.raises(PlacementError, match="1 dead node") as err:
        check_replication_factor(topo, 3)
    assert err.value.code == ErrorCode.invalid_replication_factor
    assert all(3 not in r for r in place_partitions(topo, 5, 2))


def test_unlabelled_nodes_are_their_own_hosts():
    topo = Topology.of({1: None, 2: "", 3: "rack-a", 4: "rack-a"})
    assert [topo.host_of(n) for n in (1, 2, 3, 4)] == ["1", "2", "rack-a", "rack-a"]
    assert len(topo.live_hosts()) == 3


def test_new_topics_place_on_a_newly_added_node_first():
    rng = seeded("new-node")
    for case in range(200):
        old = rng.randint(3, 6)
        topo = Topology.of(range(1, old + 1))
        assignments: list[tuple[int, ...]] = []
        for t in range(3):  # 36 partitions at RF 3: every old node holds >= 16 replicas
            topo = topo.with_load(count_load(assignments))
            assignments += place_partitions(topo, 12, 3, topic=f"t{case}.{t}")
        new = old + 1
        topo = Topology.of(range(1, new + 1), load=count_load(assignments))
        partitions = rng.randint(1, 12)
        out = place_partitions(topo, partitions, 3, topic=f"new{case}")
        load = count_load(out)
        # The empty node stays the least loaded throughout, so it takes a replica of
        # every partition; its preferred leaderships are the topic's ceil(P/N) share
        # (per-topic spread first), taken first among equals.
        assert all(new in replicas for replicas in out), (case, out)
        assert load[new].preferred == -(-partitions // new), (case, out)
        assert out[0][0] == new, (case, out)


def test_added_partitions_continue_the_topics_spread():
    topo = Topology.of(range(1, 6))
    first = place_partitions(topo, 3, 3, topic="grow")
    more = place_partitions(topo, 7, 3, topic="grow", existing=first)
    preferred = [r[0] for r in first + more]
    assert sorted(preferred.count(n) for n in range(1, 6)) == [2, 2, 2, 2, 2]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hosts": {}}, r"Topology\.hosts must name"),
        ({"hosts": {0: None}}, r"node ids must be integers >= 1"),
        ({"hosts": {1: None}, "live": frozenset({2})}, r"Topology\.live names nodes"),
        ({"hosts": {1: None}, "load": {2: NodeLoad()}}, r"Topology\.load names nodes"),
        ({"hosts": {1: 7}}, r"a label is text"),
    ],
)
def test_invalid_topologies_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Topology(**kwargs)


def test_invalid_loads_name_the_field():
    with pytest.raises(ValueError, match=r"NodeLoad\.replicas"):
        NodeLoad(-1, 0)
    with pytest.raises(ValueError, match=r"NodeLoad\.preferred"):
        NodeLoad(1, 2)


def test_a_multiple_of_the_node_count_gives_every_node_the_same_replicas():
    rng = seeded("multiple")
    for case in range(300):
        n = rng.randint(1, 8)
        rf = rng.randint(1, n)
        out = place_partitions(
            Topology.of(range(1, n + 1)), rng.randint(1, 5) * n, rf, topic=str(case)
        )
        load = count_load(out)
        assert len(load) == n and len({v.replicas for v in load.values()}) == 1, (case, out)
