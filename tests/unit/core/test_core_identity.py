"""Node identity in the core: incarnations in the membership, founding, replacements.

The scenario of issue 12 ("Why"), driven by hand on three RawNodes: F1 stalls,
records commit on L and F2, L and F2 crash, F2 comes back empty, F1 resumes.
Without incarnations F2 votes for F1 and the acknowledged records are lost
(the last test shows it); with them F2 never votes until the leader has caught
it up and admitted it again.
"""

from __future__ import annotations

import random

import pytest

from raftlog.core import Membership, MemoryStorage, ProposalDroppedError, RaftConfig, RawNode, Role
from raftlog.core.messages import (
    IDENTITY_LEGACY,
    IDENTITY_SEALED,
    Heartbeat,
    HeartbeatResponse,
    RequestVote,
)
from raftlog.sim.harness import Cluster


def _until_leader(c: Cluster, ids: tuple[int, ...], max_ticks: int = 400) -> int:
    for _ in range(max_ticks):
        for i in ids:
            if c.peers[i].alive:
                c.peers[i].node.tick()
        c.stabilize()
        lead = c.leader()
        if lead is not None and lead in ids:
            return lead
    raise AssertionError(f"no leader among {ids} within {max_ticks} ticks")


def _founded(seed: int = 1) -> tuple[Cluster, int]:
    c = Cluster((1, 2, 3), seed=seed, incarnations=True)
    lead = _until_leader(c, (1, 2, 3))
    c.tick_all(3)
    return c, lead


def test_founding_records_every_incarnation_before_any_data():
    c, lead = _founded()
    for i in (1, 2, 3):
        m = c.node(i).membership
        assert m.incarnation_map() == {1: 1001, 2: 1002, 3: 1003}, i
        assert c.node(i).may_vote
    # the seal is the entry right after the leader's no-op: no data before it
    log = c.peers[lead].log()
    first_config = next(e for e in log if e.type.name == "CONFIG")
    assert all(e.type.name == "NOOP" for e in log if e.index < first_config.index)


def test_membership_encoding_keeps_the_old_form_readable():
    old = Membership.decode(b"v=1,2,3;l=4")
    assert old == Membership.of((1, 2, 3), (4,)) and not old.sealed()
    m = Membership.of((1, 2, 3), (4,), {1: 7, 4: 9}, pending=(4,))
    assert m.encode() == b"v=1@7,2,3;l=4@9;p=4"
    assert Membership.decode(m.encode()) == m
    assert m.incarnation_of(2) == 0 and m.incarnation_of(4) == 9
    r = m.replace(2, 55)
    assert r.voters == {1, 3} and r.learners == {2, 4} and r.pending == {2, 4}
    assert r.incarnation_of(2) == 55
    assert r.add_voter(2).pending == {4}
    assert m.remove(1).incarnation_of(1) == 0


def test_a_wiped_follower_is_replaced_then_admitted_again():
    c, lead = _founded()
    follower = next(i for i in (1, 2, 3) if i != lead)
    c.wipe(follower)
    n = c.node(follower)
    assert n.membership == Membership.of((1, 2, 3))  # from the peers setting
    assert not n.may_vote  # a fresh storage founds only after hearing every voter unsealed
    c.tick(lead, 1)  # the leader's traffic: sealed, and its log records the old storage
    assert not n.may_vote
    c.tick_all(40)
    m = c.node(lead).membership
    assert m.voters == {1, 2, 3} and m.incarnation_of(follower) == 1100 + follower
    assert c.node(follower).may_vote and c.node(follower).membership == m


def test_the_issue_scenario_loses_nothing_and_readmits_the_wiped_node():
    c, lead = _founded(seed=3)
    f1, f2 = (i for i in (1, 2, 3) if i != lead)
    c.isolate(f1)  # F1 stalls (SIGSTOP)
    acked = [c.propose(lead, b"rec-%d" % k)[0] for k in range(20)]
    assert c.node(lead).log.committed >= acked[-1]  # acks=all: on L and F2
    c.crash(lead)
    c.wipe(f2)  # F2's data directory is gone; it starts empty
    c.heal()
    c.crash(lead)  # (heal() must not revive L)
    # F1 resumes: F1 and F2 alone never elect a leader (F2 refuses its vote)
    for _ in range(300):
        c.tick(f1)
        c.tick(f2)
        assert c.node(f1).role is not Role.LEADER
        assert c.node(f2).role is not Role.LEADER
    assert not c.node(f2).may_vote
    # L comes back: a leader with every acknowledged record, F2 replaced and re-admitted
    c.restart(lead)
    new_lead = _until_leader(c, (lead, f1), max_ticks=600)
    assert new_lead in (lead, f1)
    c.tick_all(200)
    ld = c.node(c.leader())
    m = ld.membership
    assert m.voters == {1, 2, 3} and not m.pending, m
    assert m.incarnation_of(f2) == 1000 + f2 + 100
    for i in (1, 2, 3):
        assert [b"rec-%d" % k for k in range(20)] == [
            d for d in c.peers[i].applied if d.startswith(b"rec-")
        ], i
        assert c.node(i).may_vote


def test_without_incarnations_the_same_scenario_loses_acknowledged_records():
    """The scenario is a real hazard: plain Raft elects F1 and overwrites L."""
    c = Cluster((1, 2, 3), seed=3)
    lead = _until_leader(c, (1, 2, 3))
    f1, f2 = (i for i in (1, 2, 3) if i != lead)
    c.isolate(f1)
    for k in range(20):
        c.propose(lead, b"rec-%d" % k)
    c.crash(lead)
    c.peers[f2].storage = type(c.peers[f2].storage)()
    c.restart(f2)
    c.heal()
    c.crash(lead)
    assert _until_leader(c, (f1, f2), max_ticks=600) in (f1, f2)
    assert not any(d.startswith(b"rec-") for d in c.peers[f2].applied)


def test_replacement_acks_do_not_count_and_its_votes_are_refused():
    c, lead = _founded(seed=5)
    f1, f2 = (i for i in (1, 2, 3) if i != lead)
    c.crash(f1)
    c.wipe(f2)
    # a vote request from the wiped storage is refused by a voter that records the old one
    c.restart(f1)
    voter = c.node(f1)
    voter.step(
        RequestVote(
            src=f2,
            dst=f1,
            term=voter.term + 1,
            last_index=10**6,
            last_term=voter.term + 1,
            pre_vote=True,
            incarnation=1100 + f2,
            identity=IDENTITY_SEALED,
        )
    )
    resp = [m for m in voter.ready().messages if m.dst == f2 and m.type.name == "VOTE_RESP"]
    assert len(resp) == 1 and not resp[0].granted
    c.crash(f1)
    # only L and the wiped F2 answer: nothing commits on F2's acknowledgements, and
    # its replacement (a configuration change) waits for F1
    ld = c.node(lead)
    before = ld.log.committed
    ld.propose(b"x")
    c.stabilize()
    c.tick_all(20)
    assert ld.log.committed == before
    assert c.peers[f2].storage.last_index() > before  # F2 does hold the entries
    c.restart(f1)
    c.tick_all(60)
    lead2 = c.leader()
    assert lead2 is not None
    assert c.node(lead2).membership.incarnation_of(f2) == 1100 + f2
    assert b"x" in c.peers[f2].applied


def _vote_from(voter, src: int, incarnation: int, admitted: bool, last: tuple[int, int]):
    voter.step(
        RequestVote(
            src=src,
            dst=voter.id,
            term=voter.term + 1,
            last_index=last[0],
            last_term=last[1],
            pre_vote=True,
            incarnation=incarnation,
            identity=IDENTITY_SEALED,
            candidate_admitted=admitted,
        )
    )
    resp = [m for m in voter.ready().messages if m.dst == src and m.type.name == "VOTE_RESP"]
    assert len(resp) == 1
    return resp[0].granted


def test_a_stale_voter_trusts_the_candidates_own_admission_of_its_storage():
    """Sim seed 1698 (every storage-loss kind): a voter whose membership predates the
    admission of a candidate's new storage refused the most up-to-date candidate for
    good, and no other could win. A candidate whose own membership records its current
    incarnation says so (candidate_admitted); the voter trusts it for a log at least as
    up to date as its own only; a replacement never says so."""
    c, lead = _founded(seed=5)
    f1, f2 = (i for i in (1, 2, 3) if i != lead)
    c.crash(f1)
    c.wipe(f2)
    c.restart(f1)
    voter = c.node(f1)
    assert voter.membership.incarnation_of(f2) == 1000 + f2  # the old storage
    ahead = (10**6, voter.term + 1)
    assert not _vote_from(voter, f2, 1100 + f2, False, ahead)
    assert _vote_from(voter, f2, 1100 + f2, True, ahead)
    # it never stands in for the log: a candidate behind the voter gets nothing
    assert not _vote_from(voter, f2, 1100 + f2, True, (0, 0))
    c.crash(f1)  # (its Readies above were taken by hand: restart it from its storage)
    # what candidates say: the replacement (not admitted yet) and an admitted member
    replacement = c.node(f2)
    assert not replacement.may_vote
    replacement.campaign()  # refused by the core itself: it may not campaign
    asks = [m for m in replacement.ready().messages if m.type.name == "VOTE"]
    assert all(not m.candidate_admitted for m in asks)
    c.restart(f1)
    c.tick_all(60)  # admitted again through the log
    assert c.node(lead).membership.incarnation_of(f2) == 1100 + f2
    member = c.node(f2)
    member.campaign()
    asks = [m for m in member.ready().messages if m.type.name == "VOTE"]
    assert asks and all(m.candidate_admitted for m in asks)


def test_a_voter_is_promoted_only_from_the_incarnation_it_answers_from():
    c, lead = _founded(seed=7)
    c.add_peer(4)
    c.node(4).cfg.incarnation = 2004
    c.node(lead).add_learner(4)
    c.stabilize()
    ld = c.node(lead)
    # the leader records the learner's incarnation itself once it has heard it
    c.tick_all(10)
    assert ld.membership.incarnation_of(4) == 2004
    with pytest.raises(ProposalDroppedError, match="node 5"):
        c.add_peer(5)
        c.tick_all(2)
        m = ld.membership.add_learner(5)
        ld.propose_membership(m)
        c.stabilize()
        ld.propose_membership(ld.membership.add_voter(5))
    ld.propose_membership(ld.membership.add_voter(4))
    c.stabilize()
    assert 4 in ld.membership.voters


def test_legacy_storage_votes_until_recorded_then_gets_recorded():
    c = Cluster((1, 2, 3), seed=2, incarnations=True)
    for i in (1, 2, 3):
        c.node(i).cfg.legacy = True  # data directories from before incarnations
    lead = _until_leader(c, (1, 2, 3))
    c.tick_all(5)
    m = c.node(lead).membership
    assert m.incarnation_map() == {1: 1001, 2: 1002, 3: 1003}
    sent = [d for d in c.delivered if d.incarnation]
    assert sent and all(d.identity & IDENTITY_LEGACY for d in sent)


def test_a_replacement_tells_a_stale_leader_about_its_newer_term():
    """Plain Raft (no PreVote, no CheckQuorum) may leave a stale-term message unanswered,
    since the node's own campaign raises the term; a replacement never campaigns, so the
    leader would heartbeat it at the old term forever (sim seed 1818)."""
    c = Cluster((1, 2, 3), seed=1, incarnations=True, pre_vote=False, check_quorum=False)
    lead = _until_leader(c, (1, 2, 3))
    c.tick_all(3)
    f2 = next(i for i in (1, 2, 3) if i != lead)
    f1 = next(i for i in (1, 2, 3) if i not in (lead, f2))
    c.wipe(f2)
    c.isolate(f1)  # (no quorum: the leader cannot admit the new storage meanwhile)
    c.tick(lead, 1)  # the replacement learns the membership that records its old storage
    rep = c.node(f2)
    assert not rep.promotable
    term = c.node(lead).term
    rep.step(RequestVote(src=f1, dst=f2, term=term + 5, last_index=10**6, last_term=term + 5))
    rep.ready()
    assert rep.term == term + 5
    rep.step(Heartbeat(src=lead, dst=f2, term=term, commit=0, context=0))
    answers = rep.ready().messages
    assert [(m.dst, m.type.name, m.term) for m in answers] == [(lead, "APPEND_RESP", term + 5)]


def test_a_leader_replaces_a_member_only_on_what_it_answered_in_this_term():
    """Sim seed 3873: a new leader still held what a peer had said long ago, from the
    storage it had before it lost its disk and was admitted under a new one; acting on
    it, the leader "replaced" the admitted node by its old incarnation (a learner that
    could never be promoted) and the cluster stalled. Identity heard in an older term
    decides nothing."""
    c, lead = _founded(seed=7)
    f1 = next(i for i in (1, 2, 3) if i != lead)
    node = c.node(lead)
    # what f1 said in an earlier term, from another storage
    node.peer_identity[f1] = (4242, IDENTITY_SEALED)
    node._identity_term[f1] = node.term - 1
    assert node.identity_change() is None
    # a pre-vote carries its sender's next term: it was still said in ours at most
    node.step(
        RequestVote(
            src=f1,
            dst=lead,
            term=node.term + 1,
            last_index=0,
            last_term=0,
            pre_vote=True,
            incarnation=4242,
            identity=IDENTITY_SEALED,
        )
    )
    assert node._identity_term[f1] == node.term
    node._identity_term[f1] = node.term - 1
    # answered from new storage in this term: that is a replacement
    node.step(
        HeartbeatResponse(
            src=f1, dst=lead, term=node.term, context=0, incarnation=4243, identity=IDENTITY_SEALED
        )
    )
    change = node.identity_change()
    assert change is not None and change.incarnation_of(f1) == 4243 and f1 in change.learners


# ------------------------------------------------------------ sealed start
# A partition group's data group starts from the controller's recorded incarnations
# (RaftConfig.incarnations): no founding round, which needs every voter.

SEALED = {1: 1001, 2: 1002, 3: 1003}


def test_an_unsealed_group_with_one_voter_down_never_founds():
    """The gap a sealed start closes: founding waits for every voter's word."""
    c = Cluster((1, 2, 3), seed=5, incarnations=True)
    c.crash(3)
    for _ in range(400):
        c.tick(1)
        c.tick(2)
    assert c.leader() is None
    assert not c.node(1).may_vote and not c.node(2).may_vote


def test_a_sealed_start_elects_with_one_voter_down_and_admits_it_later():
    c = Cluster((1, 2, 3), seed=5, incarnations=True, sealed=SEALED)
    c.crash(3)
    lead = _until_leader(c, (1, 2))
    log = c.peers[lead].log()
    # nothing to record: no founding seal entry before the data
    assert not [e for e in log if e.type.name == "CONFIG"], log
    for k in range(5):
        c.propose(lead, b"rec-%d" % k)
    assert c.node(lead).log.committed == c.node(lead).log.last_index()
    # node 3 starts for the first time: its storage is the one recorded, so it votes
    # at once (it never voted or acknowledged anything, so it forgot nothing)
    c.restart(3)
    assert c.node(3).may_vote
    c.tick_all(40)
    assert [d for d in c.peers[3].applied if d.startswith(b"rec-")] == [
        b"rec-%d" % k for k in range(5)
    ]
    assert c.node(c.leader()).membership == Membership.of((1, 2, 3), (), SEALED)


def test_a_sealed_start_keeps_a_storage_it_does_not_record_from_voting():
    """Node 3 comes up under another incarnation than the placement recorded (its host
    was wiped since): a replacement until the leader has caught it up and admitted it."""
    c = Cluster((1, 2, 3), seed=5, incarnations=True, sealed=SEALED)
    c.crash(3)
    lead = _until_leader(c, (1, 2))
    c.propose(lead, b"rec-0")
    c.wipe(3)  # a new incarnation (1103), the sealed configuration still says 1003
    n = c.node(3)
    assert n.is_replacement() and not n.may_vote
    c.tick_all(60)
    m = c.node(c.leader()).membership
    assert m.voters == {1, 2, 3} and not m.pending, m
    assert m.incarnation_of(3) == 1103
    assert c.node(3).may_vote
    assert b"rec-0" in c.peers[3].applied


def test_sealed_start_incarnations_must_name_members():
    for bad in ({4: 7}, {1: 0}, {1: 1 << 63}):
        cfg = RaftConfig(id=1, peers=(1, 2, 3), incarnations=bad)
        with pytest.raises(ValueError, match="initial incarnations"):
            RawNode(cfg, MemoryStorage(), random.Random(1))
