"""ReadIndex (thesis 6.4) and leadership transfer (thesis 3.10)."""

from __future__ import annotations

import pytest

from raftlog.core import MsgType, ProposalDroppedError, RawNotLeaderError, ReadState, Role
from raftlog.sim.harness import Cluster


def test_leader_read_index_is_confirmed_by_a_heartbeat_quorum():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.propose(1, b"a")
    c.node(1).read_index(b"r1")
    c.stabilize()
    assert c.peers[1].read_states == [ReadState(2, b"r1")]


def test_isolated_leader_never_answers_a_read():
    c = Cluster((1, 2, 3), check_quorum=False)
    c.elect(1)
    c.propose(1, b"a")
    c.isolate(1)
    c.node(1).read_index(b"r1")
    c.tick(1, 30)
    assert c.peers[1].read_states == []  # a newer leader may exist: no stale read


def test_read_waits_until_the_leader_commits_an_entry_of_its_term():
    c = Cluster((1, 2, 3))
    c.drop(type=MsgType.APPEND_RESP)  # the no-op cannot commit
    c.elect(1)
    n1 = c.node(1)
    assert n1.log.committed == 0
    n1.read_index(b"r")
    c.tick_all(3)
    assert c.peers[1].read_states == []
    c.heal()
    c.tick_all(2)
    assert c.peers[1].read_states == [ReadState(1, b"r")]


def test_follower_read_is_forwarded_to_the_leader():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.propose(1, b"a")
    c.node(3).read_index(b"f")
    c.stabilize()
    assert c.peers[3].read_states == [ReadState(2, b"f")]
    c2 = Cluster((1, 2, 3))
    with pytest.raises(RawNotLeaderError):
        c2.node(2).read_index(b"x")  # no leader known


def test_single_voter_reads_immediately():
    c = Cluster((1,))
    c.elect(1)
    c.node(1).read_index(b"x")
    c.stabilize()
    assert c.peers[1].read_states == [ReadState(1, b"x")]


def test_transfer_to_an_up_to_date_follower():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.propose(1, b"a")
    c.node(1).transfer_leader(3)
    c.stabilize()
    assert c.leader() == 3 and c.node(3).term == 2
    assert c.node(1).role is Role.FOLLOWER and c.node(1).lead == 3


def test_transfer_catches_the_target_up_first_and_bypasses_the_lease():
    c = Cluster((1, 2, 3), check_quorum=True)
    c.elect(1)
    c.isolate(3)
    for k in range(5):
        c.propose(1, b"%d" % k)
    c.heal()
    c.node(1).transfer_leader(3)
    with pytest.raises(ProposalDroppedError):
        c.node(1).propose(b"refused during transfer")
    c.stabilize()
    assert c.leader() == 3
    assert c.peers[3].log()[-1].term == 2  # its own no-op after the full log


def test_a_lost_timeout_now_is_sent_again_at_the_next_heartbeat_answer():
    """An idle group (no entries, so no append answer ever moves the transferee's match):
    the TimeoutNow to a restarted transferee is lost with its broken stream, and the
    next heartbeat answer sends it again, well within the transfer's election timeout."""
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.propose(1, b"a")
    c.crash(3)  # restarting: the leader's TimeoutNow to it is lost
    c.node(1).transfer_leader(3)
    c.stabilize()
    assert c.leader() == 1 and c.node(1).lead_transferee == 3
    c.restart(3)
    c.tick(1)  # one heartbeat round (heartbeat_tick=1): its answer brings TimeoutNow
    assert c.leader() == 3 and c.node(3).term == 2
    assert c.node(1).role is Role.FOLLOWER and c.node(1).lead == 3


def test_transfer_aborts_after_an_election_timeout():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.crash(3)
    c.node(1).transfer_leader(3)
    c.stabilize()
    with pytest.raises(ProposalDroppedError):
        c.node(1).propose(b"x")
    c.tick_all(10)
    assert c.leader() == 1
    c.propose(1, b"x")  # accepted again


def test_transfer_to_self_or_non_voter_is_refused():
    c = Cluster((1, 2, 3), learners=(4,))
    c.elect(1)
    c.node(1).transfer_leader(1)
    with pytest.raises(ValueError):
        c.node(1).transfer_leader(4)
    with pytest.raises(RawNotLeaderError):
        c.node(2).transfer_leader(3)
