"""Draining a node: the replica moves that take every data group off it (partition
groups; `raftsink members remove N` runs them before N leaves the controller, as
Redpanda's decommission does).

Pure: the placement as it is now in, the moves still to start and the groups still
moving out. Called again on every round of a drain (sink/members/drain.py), so a drain
resumes wherever it stopped (a crashed command, a timeout, a new controller leader):

- a group without the node among its members (replicas, a move's target, `leaving`)
  is done;
- a group moving to a target without the node is waiting: its leader finishes the
  move, then MOVE_DONE drops the node (unless a node the target adds is not live any
  more: then the group is moved again, that node replaced too);
- any other group (the node among its replicas with no move, or a target naming it)
  gets a move: the node replaced by a live node on a host the group's other replicas
  do not use, the one with the fewest replicas (then preferred leaderships, then the
  lowest id), so the replication factor is kept and the drained replicas spread over
  the least loaded nodes. The replacement goes last in the list: the group's next
  replica becomes the preferred leader, never the new node that is still catching up.

A group that cannot keep its replication factor without the node (RF 3 on 3 hosts)
refuses the whole drain before anything is started (PlacementError, INVALID_REPLICATION_
FACTOR, naming the group): a drain never shrinks a group; add a node first.

`topology` is what placement may use during the drain: its live nodes are the
controller's voters that are up, without the drained node and without any other node
being drained (their hosts count as used only where they hold a replica of the group).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from sink.placement.errors import PlacementError
from sink.placement.topology import Topology


class Placed(Protocol):
    """A data group as the controller's placement table has it (GroupPlacement)."""

    @property
    def group(self) -> int: ...
    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def target(self) -> tuple[int, ...]: ...
    @property
    def leaving(self) -> tuple[int, ...]: ...


@dataclass(frozen=True, slots=True)
class DrainMove:
    group: int
    current: tuple[int, ...]
    """The group's replica list now (the move's compare-and-set)."""
    target: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DrainPlan:
    node: int
    moves: tuple[DrainMove, ...]
    """Moves to start now."""
    waiting: tuple[int, ...]
    """Groups already moving off the node (their moves not done yet)."""

    @property
    def done(self) -> bool:
        """No group has the node among its members any more."""
        return not self.moves and not self.waiting

    @property
    def groups_left(self) -> int:
        return len(self.moves) + len(self.waiting)


def _members(g: Placed) -> tuple[int, ...]:
    out = tuple(g.replicas) + tuple(n for n in g.target if n not in g.replicas)
    return out + tuple(n for n in g.leaving if n not in out)


def plan_drain(topology: Topology, groups: Iterable[Placed], node: int) -> DrainPlan:
    """The moves that take `node` off every group (see the module's docstring);
    PlacementError if a group cannot keep its replication factor without it."""
    groups = sorted(groups, key=lambda g: g.group)
    live = [n for n in topology.live_nodes if n != node]
    # Load counts every group's list as it will be (a move's target, else replicas),
    # updated as this plan adds replicas, so a drain spreads over the least loaded.
    replicas: dict[int, int] = {n: 0 for n in live}
    preferred: dict[int, int] = {n: 0 for n in live}
    for g in groups:
        now = g.target or g.replicas
        for i, n in enumerate(now):
            if n in replicas:
                replicas[n] += 1
                preferred[n] += i == 0
    moves: list[DrainMove] = []
    waiting: list[int] = []
    refused: list[str] = []
    live_set = set(live)
    for g in groups:
        if node not in _members(g):
            continue
        new_live = all(n in g.replicas or n in live_set for n in g.target)
        if g.target and node not in g.target and new_live:
            waiting.append(g.group)
            continue
        base = tuple(g.target or g.replicas)
        # Keep the list but the node and any new replica on a node that is not live
        # any more (a move onto it would wait for it forever); refill to the same size.
        keep = [n for n in base if n != node and (n in g.replicas or n in live_set)]
        added: list[int] = []
        for _ in range(len(base) - len(keep)):
            used = {_host(topology, n) for n in keep + added}
            choices = [n for n in live if n not in keep + added and topology.host_of(n) not in used]
            if not choices:
                break
            pick = min(choices, key=lambda n: (replicas[n], preferred[n], n))
            replicas[pick] += 1
            added.append(pick)
        if len(keep) + len(added) < len(base):
            refused.append(f"group {g.group} {list(base)}")
            continue
        moves.append(DrainMove(g.group, tuple(g.replicas), (*keep, *added)))
    if refused:
        hosts = sorted({topology.host_of(n) for n in live})
        raise PlacementError(
            ErrorCode.invalid_replication_factor,
            f"cannot drain node {node}: {len(refused)} group(s) would lose a replica "
            f"({', '.join(refused[:5])}{', ...' if len(refused) > 5 else ''}): each needs "
            f"a live node on a host none of its other replicas use, and the nodes "
            f"placement may use are on {len(hosts)} host(s) ({', '.join(hosts) or 'none'}); "
            "a drain never lowers a replication factor: add a node first",
        )
    return DrainPlan(node, tuple(moves), tuple(waiting))


def _host(topology: Topology, node: int) -> str:
    """A replica's host; a node placement may not use (drained, removed) is its own."""
    return topology.host_of(node) if node in topology.hosts else str(node)


def groups_on(groups: Iterable[Placed], node: int) -> list[int]:
    """The groups that have node among their members (hosting it)."""
    return sorted(g.group for g in groups if node in _members(g))
