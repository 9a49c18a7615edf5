"""Log replication (Raft 5.3, 5.4.2): probing, pipelining, conflicts, commit rule."""

from __future__ import annotations

import random

import pytest

from raftlog.core import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    MemoryStorage,
    MsgType,
    ProgressState,
    RaftConfig,
    RaftSafetyError,
    RawNode,
    Role,
)
from raftlog.entry import EntryType, HardState, LogEntry
from raftlog.sim.harness import Cluster


def E(index: int, term: int, data: bytes = b"") -> LogEntry:
    return LogEntry(index, term, EntryType.DATA, data)


def follower(entries=(), term=1, commit=0, i=2) -> tuple[RawNode, MemoryStorage]:
    st = MemoryStorage()
    st.append(list(entries))
    st.set_hard_state(HardState(term, 0, commit))
    n = RawNode(RaftConfig(id=i, peers=(1, 2, 3)), st, random.Random(1), st.hard_state)
    return n, st


def persist(n: RawNode, st: MemoryStorage):
    rd = n.ready()
    if rd.snapshot:
        st.apply_snapshot(rd.snapshot)
    st.append(rd.entries)
    if rd.hard_state:
        st.set_hard_state(rd.hard_state)
    n.advance(rd)
    return rd


def test_entries_replicate_and_commit_on_all_nodes():
    c = Cluster((1, 2, 3))
    c.elect(1)
    for k in range(10):
        c.propose(1, b"%d" % k)
    c.tick_all(2)
    for p in c.peers.values():
        assert p.applied == [b"%d" % k for k in range(10)]


def test_follower_repairs_a_conflicting_suffix_figure_7():
    # follower has extra uncommitted entries of an old term 2 (Figure 7 (f))
    n, st = follower([E(1, 1), E(2, 1), E(3, 2), E(4, 2), E(5, 2)], term=2, commit=2)
    # the leader of term 3 has [1,1] [2,1] [3,3] [4,3]; probes at its last index
    n.step(AppendEntries(src=1, dst=2, term=3, prev_index=4, prev_term=3, entries=[], commit=2))
    rej = persist(n, st).messages[0]
    assert rej.reject and rej.index == 4
    # hint: the last index whose term <= 3 is 5 -> clamp to prev 4, term 2
    assert (rej.reject_hint, rej.log_term) == (4, 2)
    n.step(
        AppendEntries(
            src=1, dst=2, term=3, prev_index=2, prev_term=1, entries=[E(3, 3), E(4, 3)], commit=2
        )
    )
    rd = persist(n, st)
    assert rd.entries == [E(3, 3), E(4, 3)]
    assert st.all_entries() == [E(1, 1), E(2, 1), E(3, 3), E(4, 3)]
    assert rd.messages[0].index == 4 and not rd.messages[0].reject


def test_stale_or_duplicated_append_never_erases_newer_entries():
    n, st = follower(term=1)
    n.step(AppendEntries(src=1, dst=2, term=1, prev_index=0, prev_term=0, entries=[E(1, 1)]))
    n.step(
        AppendEntries(src=1, dst=2, term=1, prev_index=1, prev_term=1, entries=[E(2, 1), E(3, 1)])
    )
    persist(n, st)
    # a delayed duplicate of the first append arrives
    n.step(AppendEntries(src=1, dst=2, term=1, prev_index=0, prev_term=0, entries=[E(1, 1)]))
    rd = persist(n, st)
    assert st.all_entries() == [E(1, 1), E(2, 1), E(3, 1)]
    assert rd.entries == []
    # its answer covers only what it verified (index 1), not the follower's last index
    assert rd.messages[0].index == 1


def test_a_term_less_append_is_dropped_unread():
    """Only a forwarded ReadIndex travels with term 0: an append claiming term 0 (malformed or
    forged; terms start at 1) must neither touch the log nor be answered."""
    n, st = follower([E(1, 1), E(2, 1)], term=1, commit=1)
    n.step(
        AppendEntries(src=1, dst=2, term=0, prev_index=2, prev_term=1, entries=[E(3, 1, b"evil")])
    )
    rd = persist(n, st)
    assert st.all_entries() == [E(1, 1), E(2, 1)] and rd.messages == [] and n.term == 1


def test_follower_never_truncates_committed_entries():
    n, _ = follower([E(1, 1), E(2, 1)], term=1, commit=2)
    # a (buggy) leader claims index 2 has another term: ignored below commit
    n.step(AppendEntries(src=1, dst=2, term=2, prev_index=1, prev_term=1, entries=[E(2, 2)]))
    assert n.ready().messages[0].index == 2  # answered with the commit index
    with pytest.raises(RaftSafetyError):
        n.log.append([E(2, 3)])


def test_commit_rule_figure_8_old_term_entries_are_not_committed_by_counting():
    """Raft Figure 8: a leader must not commit an entry of an earlier term by
    counting replicas, because a node with a later-term entry can still win."""
    c = Cluster((1, 2, 3, 4, 5), pre_vote=False, check_quorum=False, max_msg_bytes=1)
    c.elect(1)  # term 1, no-op at index 1 everywhere
    c.tick_all(1)
    # (a) S1 (term 1) replicates index 2 only to S2
    c.partition({1, 2}, {3, 4, 5})
    c.propose(1, b"A")
    assert [len(c.peers[i].log()) for i in (1, 2, 3, 4, 5)] == [2, 2, 1, 1, 1]
    # (b) S1 crashes; S5 wins term 2 with votes of S3, S4 and appends its no-op
    #     at index 2 locally only
    c.crash(1)
    c.heal()
    c.drop(src=5, type=MsgType.APPEND)
    c.partition({3, 4, 5}, {1, 2})
    c.elect(5)
    assert c.node(5).term == 2 and c.node(5).log.term_at(2) == 2
    # (c) S5 crashes; S1 restarts and wins term 3 with S2, S3, S4. It replicates
    #     the term-1 entry at index 2 to a majority, but not its term-3 no-op.
    c.crash(5)
    c.heal()
    c.restart(1)
    c.filters.append(
        lambda m: not (m.type is MsgType.APPEND and any(e.term == 3 for e in m.entries))
    )
    c.node(1).campaign()
    c.stabilize()
    if c.node(1).role is not Role.LEADER:  # lost term 2 (S3, S4 voted for S5): retry
        c.node(1).campaign()
        c.stabilize()
    n1 = c.node(1)
    assert n1.role is Role.LEADER and n1.term == 3
    # S1 brings S3 and S4 up to index 2 (its term-3 no-op is held back by the filter)
    for f in (3, 4):
        c.node(f).step(
            AppendEntries(src=1, dst=f, term=3, prev_index=1, prev_term=1, entries=[E(2, 1, b"A")])
        )
    c.stabilize()
    assert n1.progress[3].match == 2 and n1.progress[4].match == 2
    holders = [i for i in (1, 2, 3, 4) if c.node(i).log.term_at(2) == 1]
    assert len(holders) == 4  # index 2 (term 1) is on a majority of 5...
    assert n1.log.committed == 1  # ...yet it is not committed: it is not of term 3
    # (d) why: S1 crashes, S5 restarts and can still win (its last term 2 > 1)
    #     and overwrite index 2 everywhere.
    c.crash(1)
    c.heal()
    c.restart(5)
    while c.node(5).role is not Role.LEADER:
        c.campaign(5)
    c.tick_all(2)
    for i in (2, 3, 4, 5):
        assert c.node(i).log.term_at(2) == 2


def test_commit_rule_entry_commits_with_the_first_entry_of_the_current_term():
    c = Cluster((1, 2, 3), pre_vote=False, check_quorum=False)
    c.elect(1)
    c.tick_all(1)
    c.isolate(1)
    c.propose(1, b"x")  # index 2, term 1, only on S1
    c.heal()
    c.crash(1)
    c.restart(1)
    c.node(1).campaign()  # S1 has the longest log: wins term 2
    c.stabilize()
    n1 = c.node(1)
    assert n1.role is Role.LEADER and n1.term == 2
    assert n1.log.committed == 3 and n1.log.term_at(3) == 2
    c.tick_all(1)
    assert c.peers[2].applied == [b"x"]


def test_leader_counts_itself_only_after_on_persisted():
    c = Cluster((1, 2, 3))
    c.elect(1)
    n1 = c.node(1)
    c.drop(dst=2)
    c.drop(dst=3)
    c.tick_all(1)
    n1.propose(b"a")
    rd = n1.ready()
    assert [m.type for m in rd.early_messages] == [MsgType.APPEND, MsgType.APPEND]
    c.peers[1].storage.append(rd.entries)
    last = rd.entries[-1]
    # a follower acknowledges before the leader's own fsync: 1 of 3, no commit
    n1.step(AppendEntriesResponse(src=2, dst=1, term=1, index=last.index))
    assert n1.log.committed < last.index
    n1.on_persisted(last.index, last.term)  # now 2 of 3
    assert n1.log.committed == last.index


def test_probe_backs_off_to_the_followers_last_index():
    c = Cluster((1, 2, 3), beats_yield_to_appends=False)
    c.elect(1)
    c.isolate(3)
    for k in range(20):
        c.propose(1, b"%d" % k)
    c.heal()
    c.delivered.clear()
    c.tick_all(1)
    probes = [m for m in c.delivered if m.type is MsgType.APPEND_RESP and m.src == 3 and m.reject]
    # one rejection with hint = node 3's last index is enough
    assert len(probes) == 1 and probes[0].reject_hint == 1
    assert c.peers[3].log() == c.peers[1].log()


def test_pipelined_appends_are_bounded_by_count_and_bytes():
    c = Cluster((1, 2), max_msg_bytes=100, max_inflight_msgs=3, max_inflight_bytes=10_000)
    c.elect(1)
    c.tick_all(1)
    n1 = c.node(1)
    assert n1.progress[2].state is ProgressState.REPLICATE
    c.drop(src=2)  # no acknowledgements come back
    c.delivered.clear()
    n1.propose_batch([b"x" * 50] * 20)
    c.stabilize()
    apps = [m for m in c.delivered if m.type is MsgType.APPEND]
    assert len(apps) == 3  # window in count
    for m in apps:
        assert sum(len(e.data) + 16 for e in m.entries) <= 100 or len(m.entries) == 1
    c2 = Cluster((1, 2), max_msg_bytes=100, max_inflight_msgs=100, max_inflight_bytes=200)
    c2.elect(1)
    c2.tick_all(1)
    c2.drop(src=2)
    c2.delivered.clear()
    c2.node(1).propose_batch([b"x" * 50] * 20)
    c2.stabilize()
    apps = [m for m in c2.delivered if m.type is MsgType.APPEND]
    assert len(apps) == 4  # window in bytes: sends until >= 200 bytes are in flight


def test_heartbeat_carries_min_of_match_and_commit():
    c = Cluster((1, 2, 3), beats_yield_to_appends=False)
    c.elect(1)
    c.isolate(3)
    c.propose(1, b"a")
    c.heal()
    c.drop(type=MsgType.APPEND)
    c.delivered.clear()
    c.tick_all(1)
    hb = {m.dst: m.commit for m in c.delivered if isinstance(m, Heartbeat)}
    assert hb == {2: 2, 3: 1}


@pytest.mark.parametrize("yields, rounds", [(False, 1), (True, 2)])
def test_lost_append_is_repaired_via_heartbeat_response(yields, rounds):
    """With beats yielding to appends, round 1 may leave node 3 out (it answered the
    no-op since the last round and the lost append told it the commit); round 2 beats
    it (no answer since), and the beat's answer makes the leader probe and repair."""
    c = Cluster((1, 2, 3), beats_yield_to_appends=yields)
    c.elect(1)
    c.drop(dst=3, type=MsgType.APPEND)
    c.propose(1, b"a")
    c.propose(1, b"b")
    assert c.node(3).log.last_index() == 1
    c.heal()
    c.tick_all(rounds)
    assert c.peers[3].log() == c.peers[1].log()


def _beats_of_round(c: Cluster, leader: int) -> list[int]:
    """Tick the leader once (heartbeat_tick 1: a round) -> the followers it beats."""
    c.node(leader).tick()
    return sorted(m.dst for m in c.peers[leader].process_ready() if isinstance(m, Heartbeat))


@pytest.mark.parametrize("yields", [True, False])
def test_a_busy_follower_s_append_stands_in_for_its_beat(yields):
    c = Cluster((1, 2, 3), beats_yield_to_appends=yields)
    c.elect(1)
    c.drop(src=3)  # from here node 3's answers are lost
    c.tick_all(1)  # a round: what counts as answered starts over
    c.propose(1, b"a")  # node 2 answers, "a" commits (index 2)
    n1 = c.node(1)
    n1.propose(b"b")
    sent = c.peers[1].process_ready()  # the appends of "b" (telling commit 2), in flight
    assert {m.dst: m.commit for m in sent if m.type is MsgType.APPEND} == {2: 2, 3: 2}
    # Node 2 answered since the last round and its append told the commit a beat would
    # (min(match 2, commit 2)); node 3 did not answer: only it gets the beat.
    assert _beats_of_round(c, 1) == ([3] if yields else [2, 3])
    # The next round, no append since: a beat for everyone (it carries the commit).
    assert _beats_of_round(c, 1) == [2, 3]


def test_a_beat_still_goes_when_the_commit_moved_past_what_the_append_told():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.propose(1, b"a")  # the append told commit 1; "a" committed (2) after it was sent
    assert _beats_of_round(c, 1) == [2, 3]


def test_a_round_that_confirms_a_read_beats_every_follower():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.propose(1, b"a")
    n1 = c.node(1)
    n1.propose(b"b")
    c.peers[1].process_ready()  # appends in flight, each telling the current commit
    n1.read_index(b"r")
    beats = [m for m in c.peers[1].process_ready() if isinstance(m, Heartbeat)]
    assert sorted(m.dst for m in beats) == [2, 3] and all(m.context for m in beats)


def test_reordered_appends_converge():
    c = Cluster((1, 2), max_inflight_msgs=10)
    c.elect(1)
    c.tick_all(1)
    n1, n2 = c.node(1), c.node(2)
    for k in range(5):
        n1.propose(b"%d" % k)
    msgs = [m for m in c.peers[1].process_ready() if m.type is MsgType.APPEND]
    assert len(msgs) >= 1
    # deliver a single big append twice and in reverse with earlier stale ones
    n1.propose(b"z")
    msgs += [m for m in c.peers[1].process_ready() if m.type is MsgType.APPEND]
    for m in reversed(msgs + msgs):
        n2.step(m)
    c.stabilize()
    c.tick_all(2)
    assert c.peers[2].log() == c.peers[1].log()
    assert c.peers[2].applied == [b"0", b"1", b"2", b"3", b"4", b"z"]


def test_stale_leader_steps_down_when_told_about_a_newer_term():
    c = Cluster((1, 2, 3))
    c.elect(1)
    c.isolate(1)
    c.tick(2, 25)
    c.tick(3, 25)
    assert c.leader() in (2, 3)
    new_leader = c.leader()
    c.heal()
    c.tick(1, 1)  # its heartbeat is answered with the newer term
    assert c.node(1).role is Role.FOLLOWER
    assert c.node(1).lead in (0, new_leader)
