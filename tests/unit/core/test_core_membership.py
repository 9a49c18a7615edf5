"""Learners and single-server membership changes (thesis 4.1)."""

from __future__ import annotations

import pytest

from raftlog.core import Membership, ProposalDroppedError, Role, is_single_step
from raftlog.sim.harness import Cluster


def test_learner_replicates_but_never_votes_or_counts():
    c = Cluster((1,), learners=(2,))
    c.elect(1)
    c.propose(1, b"a")
    c.tick_all(1)
    assert c.peers[2].applied == [b"a"]
    # commit does not wait for the learner
    c.isolate(2)
    c.propose(1, b"b")
    assert c.node(1).log.committed == 3
    # a learner never campaigns
    c.tick(2, 100)
    assert c.node(2).role is Role.FOLLOWER and c.node(2).term == 1


def test_add_learner_then_promote_to_voter():
    c = Cluster((1, 2, 3))
    c.add_peer(4)
    c.elect(1)
    c.tick_all(1)
    c.node(1).add_learner(4)
    c.stabilize()
    c.tick_all(2)
    assert c.node(4).membership == Membership.of((1, 2, 3), (4,))
    c.node(1).add_voter(4)
    c.stabilize()
    c.tick_all(2)
    for i in (1, 2, 3, 4):
        assert c.node(i).membership.voters == {1, 2, 3, 4}
    # 4 now counts: with 2 and 3 down, 1 + 4 are not a majority of 4
    c.crash(2)
    c.crash(3)
    c.propose(1, b"x")
    assert c.node(1).log.committed < c.node(1).log.last_index()


def test_one_change_at_a_time_and_only_single_steps():
    c = Cluster((1, 2, 3))
    c.add_peer(4)
    c.add_peer(5)
    c.elect(1)
    c.tick_all(1)
    n1 = c.node(1)
    c.isolate(1)
    n1.add_learner(4)
    with pytest.raises(ProposalDroppedError):
        n1.add_learner(5)  # the first change is not committed yet
    c.heal()
    c.tick_all(2)
    with pytest.raises(ValueError):
        n1.propose_membership(Membership.of((1, 2, 3, 4, 5)))  # two voters at once
    assert is_single_step(Membership.of((1, 2, 3)), Membership.of((1, 2, 3, 4)))
    assert not is_single_step(Membership.of((1, 2, 3)), Membership.of((1, 2, 4)))


def test_removed_leader_steps_down_after_commit():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.tick_all(1)
    c.node(1).remove_node(1)
    c.stabilize()
    c.tick_all(1)
    assert c.node(1).role is Role.FOLLOWER
    assert c.node(2).membership.voters == {2, 3}
    c.tick_all(40)
    assert c.leader() in (2, 3)
    assert c.node(1).role is Role.FOLLOWER  # not promotable any more


def test_uncommitted_config_entry_is_rolled_back_with_truncation():
    c = Cluster((1, 2, 3), check_quorum=False, pre_vote=False)
    c.add_peer(4)
    c.elect(1)
    c.tick_all(1)
    c.isolate(1)
    c.node(1).add_learner(4)  # only in S1's log
    assert 4 in c.node(1).membership.learners
    c.crash(1)
    c.heal()
    c.elect(2)
    c.propose(2, b"x")
    c.restart(1)
    c.tick_all(3)
    assert c.node(1).membership == Membership.of((1, 2, 3))
