"""An operator's move of one partition group's replicas: validate the new replica list and
plan the membership changes that get there safely.

The plan is a sequence of single-server changes (Raft thesis §4.1: any two consecutive
configurations share a majority), growing before shrinking so the group never has fewer
voters than min(len(current), len(target)) at any step:
    add_learner n   (every new node; learners catch up without voting, in parallel)
    promote n       (one at a time, once caught up: learner -> voter)
    hand_off n      (only if the current leader is being removed: transfer leadership
                     to n, the new preferred leader, before removing it; never a forced
                     election)
    remove n        (dead nodes first: removing a voter that cannot vote only lowers
                     the majority the group needs)
Executed by the group's leader (the one that knows whether hand_off applies); recorded
as an intent by the controller (DESIGN §8: the replica set is controller state).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from sink.placement.errors import PlacementError
from sink.placement.topology import Topology

ADD_LEARNER = "add_learner"
PROMOTE = "promote"
HAND_OFF = "hand_off"
REMOVE = "remove"
WAIT = "wait"
"""next_step only: the learner `node` is still catching up; nothing to do yet."""


@dataclass(frozen=True, slots=True)
class MoveStep:
    action: str
    """ADD_LEARNER, PROMOTE, HAND_OFF or REMOVE (and WAIT from next_step)."""
    node: int


@dataclass(frozen=True, slots=True)
class MovePlan:
    current: tuple[int, ...]
    target: tuple[int, ...]
    """The new replica list; its first node is the new preferred leader."""
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    steps: tuple[MoveStep, ...]

    @property
    def membership_changes(self) -> bool:
        """False when only the preference order changes (no data moves)."""
        return bool(self.adding or self.removing)


def _invalid(message: str) -> PlacementError:
    return PlacementError(ErrorCode.invalid_replica_assignment, message)


def validate_assignment(topology: Topology, current: Sequence[int], target: Sequence[int]) -> None:
    """The hard rules for an explicit replica list (PlacementError otherwise):
    INVALID_REPLICATION_FACTOR (38) for an empty list or more replicas than the cluster
    has hosts; INVALID_REPLICA_ASSIGNMENT (39) for a node named twice, an unknown node, a
    new replica on a dead node, or two replicas on one host. Nodes already holding a
    replica may be dead (a move usually exists to replace them)."""
    if not target:
        raise PlacementError(
            ErrorCode.invalid_replication_factor, "a replica list needs at least one node"
        )
    all_hosts = set(topology.hosts.values())
    if len(target) > len(all_hosts):
        raise PlacementError(
            ErrorCode.invalid_replication_factor,
            f"{len(target)} replicas need {len(target)} distinct hosts; the cluster has "
            f"{len(all_hosts)}",
        )
    seen: set[int] = set()
    for node in target:
        if node in seen:
            raise _invalid(f"node {node} is named twice in {list(target)}")
        seen.add(node)
    unknown = [n for n in target if n not in topology.hosts]
    if unknown:
        raise _invalid(f"unknown node(s) {unknown}: the cluster has {sorted(topology.hosts)}")
    assert topology.live is not None
    dead_new = [n for n in target if n not in current and n not in topology.live]
    if dead_new:
        raise _invalid(f"node(s) {dead_new} are not live: a new replica there cannot catch up")
    by_host: dict[str, int] = {}
    for node in target:
        host = topology.host_of(node)
        if host in by_host:
            raise _invalid(
                f"nodes {by_host[host]} and {node} share host {host!r}: at most one replica "
                "per host"
            )
        by_host[host] = node


def move_replicas(
    topology: Topology,
    current: Sequence[int],
    target: Sequence[int],
    *,
    leader: int | None = None,
) -> MovePlan:
    """Validate `target` (validate_assignment) and plan the steps from `current`.

    leader: the group's current leader if known; then hand_off appears only when it is
    being removed. Unknown (None): hand_off appears whenever a node is removed, and the
    executing leader skips it unless it is itself among `removing`."""
    validate_assignment(topology, current, target)
    current_t, target_t = tuple(current), tuple(target)
    adding = tuple(n for n in target_t if n not in current_t)
    assert topology.live is not None
    # Dead first (fewer voters needed sooner), then by id: deterministic.
    removing = tuple(
        sorted(
            (n for n in current_t if n not in target_t),
            key=lambda n: (n in topology.live, n),
        )
    )
    steps = [MoveStep(ADD_LEARNER, n) for n in adding]
    steps += [MoveStep(PROMOTE, n) for n in adding]
    if removing and (leader is None or leader in removing):
        steps.append(MoveStep(HAND_OFF, target_t[0]))
    steps += [MoveStep(REMOVE, n) for n in removing]
    return MovePlan(current_t, target_t, adding, removing, tuple(steps))


def next_step(
    voters: Sequence[int],
    learners: Sequence[int],
    target: Sequence[int],
    leader: int,
    caught_up: Callable[[int], bool],
    live: Callable[[int], bool] = lambda n: True,
) -> MoveStep | None:
    """The one membership change a group's leader makes next to bring its Raft
    configuration (voters, learners) to `target`, in move_replicas' order, read from
    the configuration as it is now (so a new leader, or a changed target, resumes
    where the last step left off); None when the voters are exactly the target and no
    learner is left (the move is done).

    - a learner that is not in the target is removed first (an abandoned move's);
    - every target node not yet in the configuration is added as a learner;
    - a learner in the target is promoted once `caught_up(n)` (one at a time: the
      core allows one configuration change in flight); until then the step is WAIT;
    - then, if this leader is being removed, it hands leadership to the target's
      first voter (never a forced election);
    - then the voters not in the target are removed, dead ones (`live` False) first.
    Every step is safe to repeat: the caller re-reads the configuration each time.
    """
    vset, lset, tset = set(voters), set(learners), set(target)
    for n in sorted(lset - tset):
        return MoveStep(REMOVE, n)
    for n in target:
        if n not in vset and n not in lset:
            return MoveStep(ADD_LEARNER, n)
    for n in target:
        if n in lset:
            return MoveStep(PROMOTE if caught_up(n) else WAIT, n)
    removing = sorted(vset - tset, key=lambda n: (live(n), n))
    if not removing:
        return None
    if leader in removing:
        return MoveStep(HAND_OFF, next(n for n in target if n in vset))
    return MoveStep(REMOVE, removing[0])
