"""next_step: a group leader's next membership change toward a move's target, read from
the configuration as it is (resumable by any leader, at any point)."""

from __future__ import annotations

from sink.placement import ADD_LEARNER, HAND_OFF, PROMOTE, REMOVE, WAIT, MoveStep, next_step


def _all(n: int) -> bool:
    return True


def _drive(voters, target, leader, live=lambda n: True):
    """Run next_step to the end, applying each step as the group would."""
    voters, learners, steps = list(voters), [], []
    for _ in range(20):
        s = next_step(voters, learners, target, leader, _all, live)
        if s is None:
            return steps, voters, learners
        steps.append((s.action, s.node))
        if s.action == ADD_LEARNER:
            learners.append(s.node)
        elif s.action == PROMOTE:
            learners.remove(s.node)
            voters.append(s.node)
        elif s.action == HAND_OFF:
            leader = s.node
        elif s.action == REMOVE:
            (voters if s.node in voters else learners).remove(s.node)
    raise AssertionError(f"no end: {steps}")


def test_replacing_a_follower_grows_before_it_shrinks():
    steps, voters, learners = _drive([1, 2, 3], [1, 2, 4], leader=1)
    assert steps == [(ADD_LEARNER, 4), (PROMOTE, 4), (REMOVE, 3)]
    assert sorted(voters) == [1, 2, 4] and learners == []


def test_removing_the_leader_hands_off_to_the_targets_first_voter_first():
    steps, voters, _ = _drive([1, 2, 3], [4, 2, 3], leader=1)
    # ... and the new leader (4) resumes from the configuration as it is.
    assert steps == [(ADD_LEARNER, 4), (PROMOTE, 4), (HAND_OFF, 4), (REMOVE, 1)]
    assert sorted(voters) == [2, 3, 4]
    assert next_step([1, 2, 3, 4], [], [4, 2, 3], 1, _all) == MoveStep(HAND_OFF, 4)


def test_a_learner_still_catching_up_is_waited_for():
    s = next_step([1, 2, 3], [4], [4, 2, 3], 1, caught_up=lambda n: False)
    assert s == MoveStep(WAIT, 4)


def test_dead_voters_go_first_and_abandoned_learners_are_removed():
    live = {1, 2, 4, 5}.__contains__
    steps, voters, _ = _drive([1, 2, 3], [4, 5, 1], leader=1, live=live)
    assert steps[-2:] == [(REMOVE, 3), (REMOVE, 2)]  # 3 is dead: first
    assert sorted(voters) == [1, 4, 5]
    # A learner of an abandoned move (target changed to 5) is taken out first.
    assert next_step([1, 2, 3], [4], [5, 2, 3], 1, _all) == MoveStep(REMOVE, 4)


def test_done_when_the_voters_are_the_target_in_any_order():
    assert next_step([3, 1, 2], [], [1, 2, 3], 1, _all) is None
    assert next_step([1, 2, 3], [], [2, 3, 1], 1, _all) is None
