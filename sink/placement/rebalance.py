"""Rebalancing replicas: the moves that spread existing data groups over the nodes
(`raftsink partitions rebalance`, typically after `members add`: a new node takes new
placements at once, but existing replicas move only when asked, as with Redpanda's and
Kafka's explicit reassignments).

Pure and deterministic. Load is replicas per placeable node (a move's target counts,
else the replicas). While the most loaded node carries at least two replicas more than
the least loaded one, a group on the former and not on the latter moves one replica
from it to it, if the latter's host is not used by the group's other replicas: the
lowest group id that qualifies, for the most loaded node (highest id on a tie) and the
least loaded (lowest id). Each group moves at most once per plan, groups already
moving are left alone, and a group keeps its size. The new node goes last in the list
(it is still catching up: the next replica becomes the preferred leader). Ends when no
pair of nodes differs by two or more, or no group can move between such a pair.
"""

from __future__ import annotations

from collections.abc import Iterable

from sink.placement.drain import DrainMove, Placed
from sink.placement.topology import Topology


def plan_rebalance(topology: Topology, groups: Iterable[Placed]) -> list[DrainMove]:
    """The moves that even out replica counts over topology's live nodes."""
    groups = sorted(groups, key=lambda g: g.group)
    live = list(topology.live_nodes)
    lists = {g.group: list(g.target or g.replicas) for g in groups}
    current = {g.group: tuple(g.replicas) for g in groups}
    load = {n: 0 for n in live}
    for nodes in lists.values():
        for n in nodes:
            if n in load:
                load[n] += 1
    movable = [g.group for g in groups if not g.target]
    moved: set[int] = set()
    out: list[DrainMove] = []

    def host(n: int) -> str:
        return topology.host_of(n) if n in topology.hosts else str(n)

    def find(hi: int, lo: int) -> int | None:
        for gid in movable:
            nodes = lists[gid]
            if gid in moved or hi not in nodes or lo in nodes:
                continue
            if host(lo) not in {host(n) for n in nodes if n != hi}:
                return gid
        return None

    while True:
        pairs = sorted(
            ((hi, lo) for hi in live for lo in live if load[hi] - load[lo] >= 2),
            key=lambda p: (load[p[1]] - load[p[0]], -p[0], p[1]),
        )
        for hi, lo in pairs:
            gid = find(hi, lo)
            if gid is not None:
                break
        else:
            return out
        new = [n for n in lists[gid] if n != hi] + [lo]
        lists[gid] = new
        moved.add(gid)
        load[hi] -= 1
        load[lo] += 1
        out.append(DrainMove(gid, current[gid], tuple(new)))
