"""move_replicas: an operator's replica list is validated like a placement (refusals with
Kafka's codes) and planned as single-server changes that grow before they shrink."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from sink.placement import (
    ADD_LEARNER,
    HAND_OFF,
    PROMOTE,
    REMOVE,
    MoveStep,
    PlacementError,
    Topology,
    move_replicas,
)
from tests.unit.placement.seeds import seeded

TOPO = Topology.of({1: "h1", 2: "h1", 3: "h2", 4: "h3", 5: "h4"}, live={1, 2, 3, 4})


def test_a_move_adds_learners_promotes_them_hands_off_and_removes():
    plan = move_replicas(TOPO, (3, 1, 4), (2, 3, 4), leader=1)
    assert plan.adding == (2,) and plan.removing == (1,)
    assert plan.steps == (
        MoveStep(ADD_LEARNER, 2),
        MoveStep(PROMOTE, 2),
        MoveStep(HAND_OFF, 2),
        MoveStep(REMOVE, 1),
    )
    # The leader stays: no hand-off. Unknown leader: the executor decides.
    assert HAND_OFF not in {
        s.action for s in move_replicas(TOPO, (3, 1, 4), (2, 3, 4), leader=3).steps
    }
    assert MoveStep(HAND_OFF, 2) in move_replicas(TOPO, (3, 1, 4), (2, 3, 4)).steps


def test_dead_replicas_are_removed_first_and_a_reorder_moves_no_data():
    plan = move_replicas(TOPO, (5, 1, 3), (3,), leader=3)
    assert plan.removing == (5, 1)  # node 5 is dead: removed first
    reorder = move_replicas(TOPO, (1, 3, 4), (4, 1, 3))
    assert not reorder.membership_changes and reorder.steps == ()


@pytest.mark.parametrize(
    ("current", "target", "code", "match"),
    [
        ((1, 3), (), ErrorCode.invalid_replication_factor, "at least one node"),
        (
            (1, 3),
            (1, 3, 4, 5, 2),
            ErrorCode.invalid_replication_factor,
            "5 distinct hosts; the cluster has 4",
        ),
        ((1, 3), (1, 3, 1), ErrorCode.invalid_replica_assignment, "named twice"),
        ((1, 3), (1, 9), ErrorCode.invalid_replica_assignment, r"unknown node\(s\) \[9\]"),
        ((1, 3), (1, 5), ErrorCode.invalid_replica_assignment, r"\[5\] are not live"),
        ((1, 3), (1, 2, 3), ErrorCode.invalid_replica_assignment, "share host 'h1'"),
    ],
)
def test_invalid_targets_are_refused_with_kafkas_code(current, target, code, match):
    with pytest.raises(PlacementError, match=match) as err:
        move_replicas(TOPO, current, target)
    assert err.value.code == code


def test_a_dead_replica_may_stay_in_the_target():
    assert move_replicas(TOPO, (5, 1), (5, 3)).adding == (3,)


def _voters_through(plan) -> list[set[int]]:
    voters = set(plan.current)
    seen = [set(voters)]
    for step in plan.steps:
        if step.action == PROMOTE:
            voters.add(step.node)
        elif step.action == REMOVE:
            voters.discard(step.node)
        seen.append(set(voters))
    return seen


def test_random_moves_change_one_voter_at_a_time_and_never_shrink_below_the_smaller_set():
    rng = seeded("moves")
    hosts = {n: f"h{n}" for n in range(1, 8)}
    topo = Topology.of(hosts)
    for _ in range(500):
        current = tuple(rng.sample(sorted(hosts), rng.randint(1, 5)))
        target = tuple(rng.sample(sorted(hosts), rng.randint(1, 5)))
        plan = move_replicas(topo, current, target, leader=rng.choice(current))
        stages = _voters_through(plan)
        assert stages[-1] == set(target)
        floor = min(len(current), len(target))
        for a, b in itertools.pairwise(stages):
            assert len(a ^ b) <= 1  # single-server changes
            assert len(b) >= floor
        learners = [s.node for s in plan.steps if s.action == ADD_LEARNER]
        promoted = [s.node for s in plan.steps if s.action == PROMOTE]
        assert learners == promoted == list(plan.adding)
