"""rebalance_preferred: reorder replica lists (no data moves) so preferred leaders spread
over the live nodes after a preferred node stays dead or nodes were added."""

from __future__ import annotations

from sink.placement import Topology, count_load, place_partitions, rebalance_preferred
from tests.unit.placement.seeds import seeded


def _preferred_counts(topo: Topology, orders) -> list[int]:
    load = count_load(orders)
    return [load[n].preferred if n in load else 0 for n in topo.live_nodes]


def test_a_dead_preferred_node_hands_its_preferences_to_live_replicas():
    topo = Topology.of(range(1, 6))
    groups = dict(enumerate(place_partitions(topo, 20, 3, topic="t")))
    dead = Topology.of(range(1, 6), live={1, 2, 3, 4})
    changed = rebalance_preferred(dead, groups)
    new = {**groups, **changed}
    assert all(order[0] != 5 for order in new.values())
    assert max(_preferred_counts(dead, new.values())) == 5  # 20 groups on 4 live nodes
    for g, order in changed.items():
        assert sorted(order) == sorted(groups[g])  # the same replicas, reordered
        assert order[1:] == tuple(n for n in groups[g] if n != order[0])


def test_a_balanced_cluster_is_left_alone():
    topo = Topology.of(range(1, 6))
    groups = dict(enumerate(place_partitions(topo, 23, 3, topic="t")))
    assert rebalance_preferred(topo, groups) == {}


def test_random_skews_end_with_no_improving_move_and_keep_replica_sets():
    rng = seeded("preferred")
    for case in range(300):
        n = rng.randint(2, 7)
        nodes = list(range(1, n + 1))
        live = set(rng.sample(nodes, rng.randint(1, n)))
        topo = Topology.of(nodes, live=live)
        rf = rng.randint(1, n)
        groups = {g: tuple(rng.sample(nodes, rf)) for g in range(rng.randint(1, 40))}
        changed = rebalance_preferred(topo, groups)
        new = {**groups, **changed}
        counts = dict(zip(topo.live_nodes, _preferred_counts(topo, new.values()), strict=True))
        for g, order in new.items():
            assert sorted(order) == sorted(groups[g]), case
            live_replicas = [r for r in order if r in live]
            if live_replicas:
                assert order[0] in live, (case, order)
                # No single move would narrow the spread.
                assert all(counts[r] + 1 >= counts[order[0]] for r in live_replicas), case
        assert rebalance_preferred(topo, new) == {}  # a fixed point
