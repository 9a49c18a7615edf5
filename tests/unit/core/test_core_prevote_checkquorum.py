"""PreVote, CheckQuorum and the leader lease (Raft thesis 9.6)."""

from __future__ import annotations

from raftlog.core import RequestVote, Role
from raftlog.sim.harness import Cluster


def test_prevote_keeps_a_partitioned_node_from_inflating_its_term():
    c = Cluster((1, 2, 3), pre_vote=True)
    c.elect(1)
    c.isolate(3)
    c.tick(3, 100)  # many election timeouts alone
    assert c.node(3).role is Role.PRE_CANDIDATE
    assert c.node(3).term == 1  # pre-votes never touch the term
    c.heal()
    c.tick_all(3)
    # rejoining does not disturb the leader: same leader, same term
    assert c.leader() == 1 and c.node(1).term == 1
    assert c.node(3).lead == 1 and c.node(3).role is Role.FOLLOWER


def test_without_prevote_a_partitioned_node_disrupts_the_leader_on_rejoin():
    c = Cluster((1, 2, 3), pre_vote=False, check_quorum=False)
    c.elect(1)
    c.isolate(3)
    c.tick(3, 100)
    assert c.node(3).term > 5
    c.heal()
    c.tick_all(25)
    assert c.node(1).term > 1  # the stale leader was forced out of its term


def test_check_quorum_leader_steps_down_when_isolated():
    c = Cluster((1, 2, 3), check_quorum=True)
    c.elect(1)
    c.isolate(1)
    c.tick(1, 9)
    assert c.node(1).role is Role.LEADER
    # activity is checked once per election timeout; the first full timeout
    # window without any answer makes the leader step down
    c.tick(1, 11)
    assert c.node(1).role is Role.FOLLOWER and c.node(1).lead == 0


def test_check_quorum_leader_stays_while_a_quorum_answers():
    c = Cluster((1, 2, 3, 4, 5), check_quorum=True)
    c.elect(1)
    c.cut(1, 4)
    c.cut(1, 5)
    c.tick_all(50)
    assert c.leader() == 1 and c.node(1).term == 1


def test_leader_lease_followers_ignore_votes_while_the_leader_is_alive():
    c = Cluster((1, 2, 3), check_quorum=True, pre_vote=False)
    c.elect(1)
    n2 = c.node(2)
    n2.step(RequestVote(src=3, dst=2, term=5, last_index=100, last_term=9))
    assert n2.term == 1 and n2.ready().messages == []
    # after an election timeout without the leader, the vote is considered
    c.isolate(1)
    c.tick(2, 10)
    n2.step(RequestVote(src=3, dst=2, term=5, last_index=100, last_term=9))
    assert n2.term == 5 and n2.vote == 3


def test_prevote_is_rejected_when_the_log_is_behind():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.isolate(3)
    c.propose(1, b"a")
    c.heal()
    c.isolate(1)  # the leader disappears; 3 lags behind 2
    c.tick(3, 30)
    assert c.node(3).role is not Role.LEADER
    c.tick(2, 30)
    assert c.leader() == 2 or c.node(2).role is Role.LEADER
