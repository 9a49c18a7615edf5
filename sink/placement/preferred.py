"""Rewriting preferred leaders without moving data: reorder each group's replica list so
the preferred leaders (first replicas) spread evenly over the live nodes.

For when striping's balance is lost: a preferred node stays dead (its groups' leaders
pile up on the others), or nodes were added (they hold replicas of new topics but prefer
too few). The controller leader computes it and records the new orders (b6 in the
partition-groups notes: SetPreferredLeaders); the leader balancer then moves leadership
to the new preferred replicas by transfer.

Greedy and deterministic: groups in sorted key order; a group whose preferred node is not
live prefers its live replica preferring fewest; then, while some group's preferred node
prefers at least two more groups than one of its other live replicas, that replica
becomes preferred. Each such move lowers the sum of squared counts, so it ends; at the end
no single move can improve the spread (max - min <= 1 among nodes sharing groups). Only
the order changes: the chosen replica moves to the front, the others keep their order.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from sink.placement.topology import Topology

K = TypeVar("K", bound=Hashable)


def _front(replicas: Sequence[int], node: int) -> tuple[int, ...]:
    return (node, *(n for n in replicas if n != node))


def rebalance_preferred(
    topology: Topology, assignments: Mapping[K, Sequence[int]]
) -> dict[K, tuple[int, ...]]:
    """Groups whose replica order should change -> their new order (first = preferred).
    Keys must be sortable (group ids, (topic, partition) pairs): the order of the greedy."""
    assert topology.live is not None
    live = topology.live
    counts = dict.fromkeys(topology.live_nodes, 0)
    order: dict[K, tuple[int, ...]] = {}
    keys = sorted(assignments)  # type: ignore[type-var]
    for key in keys:
        replicas = tuple(assignments[key])
        order[key] = replicas
        if replicas and replicas[0] in live:
            counts[replicas[0]] += 1

    def least(replicas: Sequence[int]) -> int | None:
        candidates = [n for n in replicas if n in live]
        # Ties keep the earlier position: the existing order is the operator's or the placer's.
        return min(candidates, key=lambda n: counts[n]) if candidates else None

    for key in keys:
        replicas = order[key]
        if replicas and replicas[0] not in live:
            chosen = least(replicas)
            if chosen is not None:  # no live replica: nothing to prefer, leave it
                order[key] = _front(replicas, chosen)
                counts[chosen] += 1

    moved = True
    while moved:
        moved = False
        for key in keys:
            replicas = order[key]
            if not replicas or replicas[0] not in live:
                continue
            chosen = least(replicas[1:])
            if chosen is not None and counts[chosen] + 1 < counts[replicas[0]]:
                counts[replicas[0]] -= 1
                counts[chosen] += 1
                order[key] = _front(replicas, chosen)
                moved = True
    return {k: order[k] for k in keys if order[k] != tuple(assignments[k])}
