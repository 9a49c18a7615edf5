"""Quiescence in the pure core (docs/raft-runtime.md, "Quiescence").

The runtime stops ticking a quiesced node; the harness ticks every node, so
these tests also check that a quiesced node's tick is a no-op.
"""

from __future__ import annotations

from raftlog.core import MsgType, ReadState, Role
from raftlog.core.messages import Heartbeat, HeartbeatResponse
from raftlog.sim.harness import Cluster

Q = 6


def _quiet_cluster(**cfg: object) -> Cluster:
    c = Cluster((1, 2, 3), quiesce_ticks=Q, check_quorum=True, **cfg)
    c.elect(1)
    c.propose(1, b"a")
    return c


def _beats_sent(c: Cluster) -> int:
    return sum(1 for m in c.delivered if m.type is MsgType.HEARTBEAT)


def test_an_idle_group_quiesces_after_q_ticks_and_then_sends_nothing():
    c = _quiet_cluster()
    # The CheckQuorum window must see answers first (recent_active), then Q idle ticks.
    c.tick_all(Q + 2)
    assert all(c.node(i).quiesced for i in (1, 2, 3)), [c.node(i) for i in (1, 2, 3)]
    quiesce_beats = [m for m in c.delivered if m.type is MsgType.HEARTBEAT and m.quiesce]
    assert {m.dst for m in quiesce_beats} == {2, 3}
    assert all(m.commit == c.node(1).log.committed == 2 for m in quiesce_beats)
    before = len(c.delivered)
    c.tick_all(100)  # ten election timeouts: no message, no election
    assert len(c.delivered) == before
    assert c.leader() == 1 and c.node(1).term == 1
    assert all(c.node(i).quiesced for i in (1, 2, 3))


def test_a_proposal_wakes_the_group_and_it_quiesces_again():
    c = _quiet_cluster()
    c.tick_all(Q + 2)
    assert c.node(1).quiesced
    c.propose(1, b"b")  # the appends wake the followers
    assert not any(c.node(i).quiesced for i in (1, 2, 3))
    assert c.node(1).log.committed == 3
    beats = _beats_sent(c)
    c.tick_all(1)
    assert _beats_sent(c) > beats  # heartbeating again, which carries the commit
    assert all(c.node(i).log.committed == 3 for i in (1, 2, 3))
    c.tick_all(Q + 12)
    assert all(c.node(i).quiesced for i in (1, 2, 3))


def test_no_quiescence_while_a_follower_lags():
    c = _quiet_cluster()
    c.isolate(3)
    c.propose(1, b"b")  # 3 does not have index 3
    c.tick(1, 3 * Q)
    assert not c.node(1).quiesced
    assert c.node(1).progress[3].match < c.node(1).log.last_index()
    c.heal()
    c.tick_all(3 * Q)  # caught up, then quiet
    assert c.node(3).log.committed == 3
    assert all(c.node(i).quiesced for i in (1, 2, 3))


def test_a_follower_that_cannot_agree_answers_and_its_answer_wakes_the_leader():
    c = _quiet_cluster()
    c.tick_all(Q + 2)
    n1, n2 = c.node(1), c.node(2)
    assert n1.quiesced and n2.quiesced
    # A quiesce beat whose commit node 2 cannot match (its log ends at 2).
    c.deliver([Heartbeat(src=1, dst=2, term=1, group_id=0, commit=5, quiesce=True)])
    assert not n2.quiesced and n2.log.committed == 2
    resp = c.peers[2].process_ready()
    assert [(m.type, m.dst, m.quiesce) for m in resp] == [(MsgType.HEARTBEAT_RESP, 1, True)]
    c.deliver(resp)
    assert not n1.quiesced  # the answer woke the leader
    c.stabilize()
    c.tick_all(Q + 12)  # and the group quiesces again
    assert n1.quiesced and n2.quiesced


def test_a_late_answer_to_a_plain_beat_leaves_the_quiesced_leader_quiesced():
    """With beats and answers held to a host's beat tick, the answer to the
    leader's last plain beat can arrive after it quiesced. It says nothing new
    (every follower had acknowledged the whole log): waking on it kept idle
    groups cycling between quiesced and awake (session 14, heartbeat_ticks 3)."""
    c = _quiet_cluster()
    c.tick_all(Q + 2)
    n1 = c.node(1)
    assert n1.quiesced
    beats = _beats_sent(c)
    c.deliver([HeartbeatResponse(src=2, dst=1, term=1, group_id=0)])
    c.deliver([HeartbeatResponse(src=3, dst=1, term=1, group_id=0, context=0)])
    assert n1.quiesced
    assert c.peers[1].process_ready() == []
    c.tick_all(10 * Q)
    assert n1.quiesced and _beats_sent(c) == beats
    # the flagged answer (a follower that did not quiesce) still wakes it
    c.deliver([HeartbeatResponse(src=2, dst=1, term=1, group_id=0, quiesce=True)])
    assert not n1.quiesced


def test_a_stale_term_quiesce_beat_changes_nothing():
    c = _quiet_cluster()
    c.node(1).transfer_leader(2)
    c.stabilize()
    assert c.leader() == 2 and c.node(2).term == 2
    n3 = c.node(3)
    state = (n3.term, n3.lead, n3.log.committed, n3.quiesced, n3.role)
    c.deliver([Heartbeat(src=1, dst=3, term=1, group_id=0, commit=2, quiesce=True)])
    assert (n3.term, n3.lead, n3.log.committed, n3.quiesced, n3.role) == state
    out = c.peers[3].process_ready()
    # only the stale-term answer that tells node 1 about term 2
    assert [(m.type, m.dst, m.term) for m in out] == [(MsgType.APPEND_RESP, 1, 2)]
    # and a quiesced follower stays quiesced on a stale quiesce beat
    c.tick_all(3 * Q)
    assert n3.quiesced and n3.lead == 2
    c.deliver([Heartbeat(src=1, dst=3, term=1, group_id=0, commit=9, quiesce=True)])
    assert n3.quiesced and n3.log.committed == c.node(2).log.committed


def test_read_index_on_a_quiesced_group_runs_a_real_heartbeat_round():
    c = _quiet_cluster()
    c.tick_all(Q + 2)
    assert c.node(1).quiesced
    beats = _beats_sent(c)
    c.node(1).read_index(b"r")
    assert not c.node(1).quiesced
    c.stabilize()
    assert _beats_sent(c) == beats + 2  # confirmed by the followers' answers
    assert c.peers[1].read_states == [ReadState(2, b"r")]


def test_read_on_a_quiesced_deposed_leader_never_completes():
    """Node 1 quiesced as leader of term 1; it is cut off and the others elect a
    new leader (node liveness would wake them) and commit a write. A read at
    node 1 wakes it, but no quorum confirms term 1: no stale read."""
    c = _quiet_cluster()
    c.tick_all(Q + 2)
    c.isolate(1)
    c.node(2).wake(campaign=True)
    c.node(3).wake(campaign=True)
    for _ in range(40):
        c.tick(2)
        c.tick(3)
        if c.leader() in (2, 3) and c.node(c.leader()).term > 1:
            break
    new = c.node(2) if c.node(2).role is Role.LEADER else c.node(3)
    assert new.role is Role.LEADER and new.term == 2
    c.propose(new.id, b"after")
    c.node(1).read_index(b"stale?")
    c.tick(1, 30)  # CheckQuorum deposes it; the read is never answered
    assert c.peers[1].read_states == []
    assert c.node(1).role is not Role.LEADER


def test_wake_campaign_elects_a_new_leader_within_bounded_ticks():
    """Leader 1 quiesced and its node died: the runtime calls wake(campaign=True)
    on the followers, which forget the lease and elect within 2T + a few ticks."""
    c = _quiet_cluster(pre_vote=True)
    c.tick_all(Q + 2)
    assert all(c.node(i).quiesced for i in (1, 2, 3))
    c.crash(1)
    for i in (2, 3):
        c.node(i).wake(campaign=True)
    T = c.node(2).cfg.election_tick
    ticks = 0
    while c.leader() in (None, 1) or c.node(c.leader()).term == 1:
        c.tick(2)
        c.tick(3)
        ticks += 1
        assert ticks <= 2 * T + 2, "no new leader within 2T ticks of the wake"
    assert c.leader() in (2, 3)


def test_a_quiesced_follower_ignores_votes_until_woken_for_the_leader():
    """The lease holds while quiesced (the leader's node is alive); wake(campaign)
    drops it, so the vote is granted."""
    c = _quiet_cluster(pre_vote=False)
    c.tick_all(Q + 2)
    n3 = c.node(3)
    assert n3.quiesced
    c.isolate(1)
    c.node(2).campaign()
    c.stabilize()
    assert c.node(2).role is not Role.LEADER  # 3 is in the lease of leader 1
    n3.wake(campaign=True)
    c.node(2).campaign()
    c.stabilize()
    assert c.node(2).role is Role.LEADER


def test_a_quiesced_leader_woken_without_a_quorum_steps_down_within_t_ticks():
    c = _quiet_cluster()
    c.tick_all(Q + 2)
    n1 = c.node(1)
    assert n1.quiesced
    c.isolate(1)
    n1.wake(campaign=True)
    T = n1.cfg.election_tick
    c.tick(1, T)
    assert n1.role is Role.FOLLOWER


def test_quiescence_off_by_default_in_the_core():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.tick_all(50)
    assert not any(c.node(i).quiesced for i in (1, 2, 3))
