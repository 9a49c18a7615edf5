"""Rebalancing replicas after `members add` (partition groups): the pure plan
(sink.placement.rebalance) and MoveOps.rebalance over a real SinkStateMachine applying
the entries a fake controller commits."""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections import Counter

from raftlog.entry import EntryType, LogEntry
from sink.node.replica_moves import MoveOps
from sink.placement import Topology, plan_rebalance
from sink.state.members import encode_drain_member
from sink.state.placement_table import GroupPlacement, encode_move_done, encode_place_topic
from tests.unit.sink.fake_controller import FakeController

T = uuid.UUID(int=0xBA1)


def G(group: int, replicas, target=()) -> GroupPlacement:
    return GroupPlacement(group, T.hex, group - 1, tuple(replicas), tuple(target), ())


def _rf3_on_three(n_groups: int) -> list[GroupPlacement]:
    """n_groups groups on nodes 1-3, preferred leaders rotating (as placement does)."""
    rot = [(1, 2, 3), (2, 3, 1), (3, 1, 2)]
    return [G(g, rot[(g - 1) % 3]) for g in range(1, n_groups + 1)]


def _loads(groups, moves, nodes) -> Counter:
    lists = {g.group: tuple(g.target or g.replicas) for g in groups}
    for m in moves:
        lists[m.group] = m.target
    load = Counter({n: 0 for n in nodes})
    for members in lists.values():
        load.update(members)
    return load


def test_a_new_node_takes_its_share_and_each_group_moves_once():
    groups = _rf3_on_three(12)  # 36 replicas: 12 per node
    moves = plan_rebalance(Topology.of([1, 2, 3, 4]), groups)
    assert len(moves) == 9  # 9 replicas per node afterwards
    assert len({m.group for m in moves}) == 9
    by_group = {g.group: g for g in groups}
    for m in moves:
        assert m.current == by_group[m.group].replicas
        assert len(m.target) == 3 and len(set(m.target)) == 3
        assert m.target[-1] == 4  # the new node goes last: not the preferred leader
        assert m.target[:2] == tuple(n for n in m.current if n in m.target[:2])
    assert _loads(groups, moves, [1, 2, 3, 4]) == Counter({1: 9, 2: 9, 3: 9, 4: 9})


def test_a_balanced_cluster_plans_nothing_and_the_plan_is_deterministic():
    groups = _rf3_on_three(6)
    assert plan_rebalance(Topology.of([1, 2, 3]), groups) == []
    topo = Topology.of([1, 2, 3, 4, 5])
    assert plan_rebalance(topo, groups) == plan_rebalance(topo, list(reversed(groups)))
    # A difference of one replica is balanced.
    assert plan_rebalance(Topology.of([1, 2, 3, 4]), [G(1, (1, 2, 3))]) == []


def test_a_move_never_puts_two_replicas_on_one_host():
    # Node 4 shares host "a" with node 1: a group keeping 1 cannot take 4, so only
    # replicas of node 1 itself move onto 4.
    groups = _rf3_on_three(6)
    topo = Topology({1: "a", 2: "b", 3: "c", 4: "a"})
    moves = plan_rebalance(topo, groups)
    assert moves, "node 4 is empty: some replica must move"
    for m in moves:
        assert 1 in m.current and 1 not in m.target and m.target[-1] == 4
        hosts = [topo.host_of(n) for n in m.target]
        assert len(set(hosts)) == len(hosts)


def test_groups_moving_are_left_alone_and_their_targets_count():
    groups = _rf3_on_three(6)
    groups[0] = G(1, (1, 2, 3), target=(1, 2, 4))  # already moving onto 4
    moves = plan_rebalance(Topology.of([1, 2, 3, 4]), groups)
    assert 1 not in {m.group for m in moves}
    # 18 replicas on 4 nodes: 5/5/4/4 or so; node 4 counts group 1's replica.
    load = _loads(groups, moves, [1, 2, 3, 4])
    assert max(load.values()) - min(load.values()) <= 1 and load[4] >= 4


def test_nodes_not_live_get_nothing_and_give_nothing():
    groups = _rf3_on_three(6)
    topo = Topology.of([1, 2, 3, 4, 5], live=[1, 2, 3, 4])  # 5 is being drained
    moves = plan_rebalance(topo, groups)
    assert moves and all(5 not in m.target for m in moves)


def test_random_clusters_end_balanced_within_one_or_stuck_on_hosts():
    seed = int(os.environ.get("RAFTSINK_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(200):
        n_nodes = rng.randint(3, 8)
        nodes = list(range(1, n_nodes + 1))
        old = nodes[: rng.randint(3, n_nodes)]
        groups = [G(g, rng.sample(old, 3)) for g in range(1, rng.randint(1, 40))]
        moves = plan_rebalance(Topology.of(nodes), groups)
        assert len({m.group for m in moves}) == len(moves)
        for m in moves:
            assert len(set(m.target)) == 3 and set(m.target) <= set(nodes)
        load = _loads(groups, moves, nodes)
        if max(load.values()) - min(load.values()) >= 2:
            # Only when every group on the fullest node already moved or already
            # holds a replica on the emptiest one.
            hi = max(nodes, key=lambda n: (load[n], n))
            lo = min(nodes, key=lambda n: (load[n], n))
            moved = {m.group for m in moves}
            final = {g.group: g.replicas for g in groups} | {m.group: m.target for m in moves}
            assert all(
                g in moved or lo in members for g, members in final.items() if hi in members
            ), (seed, groups, moves)


# ------------------------------------------------------------------ MoveOps.rebalance


def test_move_ops_rebalance_commits_the_moves_and_a_second_call_adds_none():
    c = FakeController([1, 2, 3])
    replicas = [(1, 2, 3), (2, 3, 1), (3, 1, 2)] * 2
    asyncio.run(c.apply(encode_place_topic("t", len(replicas), T, None, replicas)))
    ops = MoveOps(c, c.fsm, lambda: {n: None for n in c.voters}, lambda: None)
    assert asyncio.run(ops.rebalance(5.0)) == {"op": "rebalance", "moves": []}
    c.voters = [1, 2, 3, 4]  # members add 4
    first = asyncio.run(ops.rebalance(5.0))
    assert len(first["moves"]) == 4 and all(m["target"][-1] == 4 for m in first["moves"])
    assert {m["topic"] for m in first["moves"]} == {"t"}
    moving = {g.group for g in c.fsm.placement if g.target}
    assert moving == {m["group"] for m in first["moves"]}
    # The moves are under way: their targets count, nothing more to start.
    index = c.index
    assert asyncio.run(ops.rebalance(5.0))["moves"] == [] and c.index == index
    for g in list(c.fsm.placement):
        if g.target:
            asyncio.run(c.apply(encode_move_done(g.group, g.target)))
    load = Counter(n for g in c.fsm.placement for n in g.replicas)
    assert sum(load.values()) == 18 and max(load.values()) - min(load.values()) <= 1
    # A node being drained takes no replica from a rebalance.
    c.fsm.on_apply([LogEntry(c.index + 1, 1, EntryType.DATA, encode_drain_member(4))])
    c.index += 1
    c.voters = [1, 2, 3, 4, 5]
    again = asyncio.run(ops.rebalance(5.0))
    assert again["moves"] and all(m["target"][-1] == 5 for m in again["moves"])
