"""RaftLog, quorum and progress units, with hypothesis properties."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.core import (
    AppendEntries,
    Inflights,
    Membership,
    MemoryStorage,
    RaftConfig,
    RaftLog,
    RawNode,
)
from raftlog.core.quorum import VoteResult, committed_index, vote_result
from raftlog.entry import EntryType, HardState, LogEntry


def make_log(terms: list[int]) -> list[LogEntry]:
    return [LogEntry(i + 1, t, EntryType.DATA, b"%d" % i) for i, t in enumerate(terms)]


terms_st = st.lists(st.integers(1, 4), min_size=1, max_size=30).map(sorted)


@given(terms=terms_st, split=st.integers(0, 30), max_bytes=st.integers(1, 200))
def test_slice_and_term_at_agree_across_the_stable_unstable_boundary(terms, split, max_bytes):
    ents = make_log(terms)
    split = min(split, len(ents))
    storage = MemoryStorage()
    storage.append(ents[:split])
    log = RaftLog(storage)
    if ents[split:]:
        log.append(ents[split:])
    assert log.last_index() == len(ents)
    for e in ents:
        assert log.term_at(e.index) == e.term
    assert log.term_at(0) == 0 and log.term_at(len(ents) + 1) is None
    lo = 1
    while lo <= len(ents):
        got = log.slice(lo, len(ents) + 1, max_bytes)
        assert got and got == ents[lo - 1 : lo - 1 + len(got)]
        lo += len(got)


@settings(max_examples=200, deadline=None)
@given(
    terms=terms_st,
    deliveries=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 8)), max_size=40),
)
def test_follower_log_stays_a_prefix_of_the_leader_log_under_stale_reordered_appends(
    terms, deliveries
):
    """Whatever order/duplication of one leader's appends arrive in, the
    follower's entries always equal the leader's and acknowledged entries stay."""
    leader = make_log(terms)
    term = leader[-1].term
    storage = MemoryStorage()
    storage.set_hard_state(HardState(term, 0, 0))
    n = RawNode(RaftConfig(id=2, peers=(1, 2, 3)), storage, random.Random(0), storage.hard_state)
    acked = 0
    for prev, length in deliveries:
        prev = min(prev, len(leader))
        ents = leader[prev : prev + length]
        prev_term = leader[prev - 1].term if prev else 0
        n.step(
            AppendEntries(
                src=1,
                dst=2,
                term=term,
                prev_index=prev,
                prev_term=prev_term,
                entries=ents,
                commit=len(leader),
            )
        )
        rd = n.ready()
        storage.append(rd.entries)
        if rd.hard_state:
            storage.set_hard_state(rd.hard_state)
        n.advance(rd)
        for m in rd.messages:
            if not m.reject:
                acked = max(acked, m.index)
        mine = storage.all_entries()
        assert mine == leader[: len(mine)]
        assert len(mine) >= acked
        assert n.log.committed <= len(mine)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=7))
def test_committed_index_is_the_largest_index_a_majority_has(matches):
    voters = list(range(1, len(matches) + 1))
    got = committed_index(voters, lambda v: matches[v - 1])
    q = len(matches) // 2 + 1
    brute = max(i for i in range(0, 51) if sum(m >= i for m in matches) >= q)
    assert got == brute


def test_vote_result():
    v = [1, 2, 3, 4, 5]
    assert vote_result(v, {1: True, 2: True}) is VoteResult.PENDING
    assert vote_result(v, {1: True, 2: True, 3: True}) is VoteResult.WON
    assert vote_result(v, {1: True, 2: False, 3: False, 4: False}) is VoteResult.LOST
    assert vote_result([1], {1: True}) is VoteResult.WON


def test_inflights_bounded_in_count_and_bytes():
    f = Inflights(max_count=3, max_bytes=100)
    f.add(1, 10)
    f.add(2, 10)
    assert not f.full()
    f.add(3, 10)
    assert f.full()
    f.free_le(2)
    assert len(f) == 1 and f.bytes == 10 and not f.full()
    f.add(4, 95)
    assert f.full()
    f.free_first()
    assert f.bytes == 95


@given(
    st.frozensets(st.integers(1, 9), min_size=1),
    st.frozensets(st.integers(1, 9)),
)
def test_membership_encoding_roundtrip(voters, learners):
    m = Membership.of(voters, learners)
    assert Membership.decode(m.encode()) == m


def test_find_conflict_by_term_skips_a_whole_divergent_term():
    storage = MemoryStorage()
    storage.append(make_log([1, 1, 2, 2, 2, 3, 3]))
    log = RaftLog(storage)
    assert log.find_conflict_by_term(7, 2) == (5, 2)
    assert log.find_conflict_by_term(7, 1) == (2, 1)
    assert log.find_conflict_by_term(7, 9) == (7, 3)
