"""Leader election (Raft 5.2, 5.4.1): terms, votes, randomized timeouts, no-op."""

from __future__ import annotations

import random

import pytest

from raftlog.core import (
    MemoryStorage,
    RaftConfig,
    RawNode,
    RequestVote,
    RequestVoteResponse,
    Role,
)
from raftlog.entry import EntryType, HardState, LogEntry
from raftlog.sim.harness import Cluster


def new_node(i: int = 1, peers=(1, 2, 3), storage=None, hs=None, **kw) -> RawNode:
    st = storage or MemoryStorage()
    return RawNode(RaftConfig(id=i, peers=peers, **kw), st, random.Random(i), hs)


def test_randomized_election_timeout_is_in_T_2T():
    seen = set()
    for seed in range(200):
        n = RawNode(RaftConfig(id=1, peers=(1, 2, 3)), MemoryStorage(), random.Random(seed))
        seen.add(n.randomized_timeout)
    assert min(seen) == 10 and max(seen) == 19


def test_follower_times_out_and_wins_election_with_noop_of_its_term():
    c = Cluster((1, 2, 3), pre_vote=False)
    n1 = c.node(1)
    for _ in range(n1.randomized_timeout):
        n1.tick()
    c.stabilize()
    assert n1.role is Role.LEADER and n1.term == 1
    assert [c.node(i).lead for i in (1, 2, 3)] == [1, 1, 1]
    # the leader's first entry in its term is a no-op, committed everywhere
    c.tick(1, 1)
    for i in (1, 2, 3):
        log = c.peers[i].log()
        assert log == [LogEntry(1, 1, EntryType.NOOP, b"")]
        assert c.node(i).log.committed == 1


def test_vote_is_durable_before_the_grant_is_sent():
    n = new_node(2)
    n.step(RequestVote(src=1, dst=2, term=1, last_index=0, last_term=0))
    rd = n.ready()
    assert rd.hard_state == HardState(term=1, vote=1, commit=0)
    # the grant is in `messages` (after persistence), never in early_messages
    assert rd.early_messages == []
    assert rd.messages == [RequestVoteResponse(src=2, dst=1, term=1, granted=True)]


def test_at_most_one_vote_per_term():
    n = new_node(2)
    n.step(RequestVote(src=1, dst=2, term=1, last_index=0, last_term=0))
    n.step(RequestVote(src=3, dst=2, term=1, last_index=5, last_term=1))
    msgs = n.ready().messages
    assert [(m.dst, m.granted) for m in msgs] == [(1, True), (3, False)]
    # the same candidate asking again (retransmission) is granted again
    n.step(RequestVote(src=1, dst=2, term=1, last_index=0, last_term=0))
    assert n.ready().messages[0].granted


def test_election_restriction_rejects_candidates_with_stale_logs():
    st = MemoryStorage()
    st.append([LogEntry(1, 1, EntryType.NOOP, b""), LogEntry(2, 2, EntryType.DATA, b"x")])
    st.set_hard_state(HardState(2, 0, 0))
    n = new_node(2, storage=st, hs=st.hard_state)
    # higher term but older last term: rejected
    n.step(RequestVote(src=1, dst=2, term=3, last_index=9, last_term=1))
    # same last term but shorter log: rejected
    n.step(RequestVote(src=3, dst=2, term=3, last_index=1, last_term=2))
    assert [m.granted for m in n.ready().messages] == [False, False]
    assert n.term == 3 and n.vote == 0


def test_candidate_returns_to_follower_on_append_from_leader_of_same_term():
    c = Cluster((1, 2, 3), pre_vote=False, check_quorum=False)
    c.elect(1)
    c.isolate(2)
    c.node(2).campaign()
    c.stabilize()
    assert c.node(2).role is Role.CANDIDATE and c.node(2).term == 2
    c.heal()
    c.elect(3)  # also term 2: node 1 votes for 3, node 2 (voted for itself) refuses
    assert c.node(3).term == 2
    assert c.node(2).role is Role.FOLLOWER and c.node(2).lead == 3


def test_split_vote_eventually_resolves():
    c = Cluster((1, 2, 3, 4, 5), seed=7, pre_vote=False)
    c.node(1).campaign()
    c.node(2).campaign()
    c.stabilize()
    for _ in range(100):
        if c.leader() is not None:
            break
        c.tick_all()
    assert c.leader() is not None


def test_single_node_commits_only_after_its_own_persistence():
    st = MemoryStorage()
    n = RawNode(RaftConfig(id=1, peers=(1,)), st, random.Random(1))
    n.campaign()
    assert n.role is Role.LEADER
    n.propose(b"a")
    rd = n.ready()
    assert [e.index for e in rd.entries] == [1, 2]
    assert rd.committed_entries == [] and n.log.committed == 0
    st.append(rd.entries)
    st.set_hard_state(rd.hard_state)
    n.advance(rd)
    assert n.log.committed == 2
    assert [e.data for e in n.ready().committed_entries] == [b"", b"a"]


def test_restart_keeps_term_and_vote():
    c = Cluster((1, 2, 3), pre_vote=False)
    c.elect(1)
    c.propose(1, b"x")
    c.crash(2)
    c.restart(2)
    n2 = c.node(2)
    assert (n2.term, n2.vote) == (1, 1)
    assert n2.log.last_index() == 2


@pytest.mark.parametrize("pre_vote", [True, False])
def test_removed_or_unknown_node_never_campaigns(pre_vote):
    n = RawNode(RaftConfig(id=9, pre_vote=pre_vote), MemoryStorage(), random.Random(1))
    for _ in range(100):
        n.tick()
    assert n.role is Role.FOLLOWER and n.term == 0 and not n.ready().messages


@pytest.mark.parametrize("pre_vote", [False, True])
def test_a_stale_vote_request_is_refused_with_the_newer_term(pre_vote):
    """The Raft paper's rule (etcd answers stale pre-votes only): a candidate that hears
    no newer term from anyone else would otherwise campaign at stale terms forever.
    Sim seed 2634: its membership listed the voter, the voter's listed it as a learner
    (so no traffic of the voter reached it) and the third node could not vote."""
    st = MemoryStorage()
    st.set_hard_state(HardState(7, 0, 0))
    voter = new_node(2, storage=st, hs=st.hard_state, pre_vote=pre_vote)
    voter.step(RequestVote(src=3, dst=2, term=5, last_index=9, last_term=4, pre_vote=pre_vote))
    (answer,) = voter.ready().messages
    assert (answer.dst, answer.term, answer.granted) == (3, 7, False)
    assert voter.term == 7 and voter.vote == 0
    candidate = new_node(3)
    candidate.campaign()
    candidate.ready()
    candidate.step(
        RequestVoteResponse(src=2, dst=3, term=7, granted=False, pre_vote=answer.pre_vote)
    )
    assert candidate.term == 7 and candidate.role is Role.FOLLOWER
