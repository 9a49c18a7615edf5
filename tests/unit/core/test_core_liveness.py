"""NodeLiveness and liveness_wakes (raftlog/core/liveness.py): when a peer process
counts as down or restarted, and which quiesced replicas wake."""

from __future__ import annotations

import random

from raftlog.core import MemoryStorage, RaftConfig, RawNode, Role
from raftlog.core.liveness import NodeLiveness, liveness_wakes


def _lv(silence: int = 100, broken: int = 10) -> NodeLiveness:
    lv = NodeLiveness(random.Random(1), silence, broken)
    lv.set_peers({2, 3})
    return lv


def _run(lv: NodeLiveness, ticks: int, connected=None, hear: dict | None = None) -> list[int]:
    out: list[int] = []
    for _ in range(ticks):
        for p, nonce in (hear or {}).items():
            lv.heard(p, nonce)
        out += lv.tick(connected)
    return out


def test_silence_alone_counts_only_after_the_silence_limit():
    lv = _lv(silence=100)
    assert _run(lv, 99, hear={3: 7}) == []
    down = _run(lv, 51, hear={3: 7})  # drawn in [100, 150]
    assert down == [2] and lv.down == {2}


def test_a_broken_stream_counts_after_the_broken_limit_of_silence():
    lv = _lv(silence=1000, broken=10)
    lv.heard(2, 5)
    lv.broken(2)
    assert _run(lv, 9, connected=lambda p: False, hear={3: 7}) == []
    assert _run(lv, 1, connected=lambda p: False, hear={3: 7}) == [2]
    assert lv.seen_broken == 1


def test_a_stream_that_comes_back_is_no_evidence():
    lv = _lv(silence=1000, broken=10)
    lv.broken(2)
    assert _run(lv, 50, connected=lambda p: True, hear={3: 7}) == []
    assert _run(lv, 50, connected=lambda p: False, hear={3: 7}) == []  # evidence was cleared


def test_a_peer_is_up_again_at_its_next_message_and_a_new_nonce_is_a_restart():
    lv = _lv(silence=10)
    assert lv.heard(2, 5) is False
    _run(lv, 20)
    assert lv.down == {2, 3}
    assert lv.heard(2, 5) is False and lv.down == {3}
    assert lv.heard(2, 6) is True  # a new process
    assert lv.heard(2, 0) is False  # a sender without a nonce says nothing


def _node(nid: int, role: Role, lead: int, quiesced: bool = True) -> RawNode:
    n = RawNode(RaftConfig(id=nid, peers=[1, 2, 3]), MemoryStorage(), random.Random(nid))
    n.role, n.lead, n.quiesced = role, lead, quiesced
    return n


def test_liveness_wakes_followers_of_a_gone_leader_to_campaign():
    f = _node(1, Role.FOLLOWER, lead=2)
    other = _node(1, Role.FOLLOWER, lead=3)
    awake = _node(1, Role.FOLLOWER, lead=2, quiesced=False)
    out = liveness_wakes(1, [("f", f), ("o", other), ("a", awake)], {2}, {2})
    assert out == [("f", True)]


def test_liveness_wakes_a_leader_without_a_live_quorum_but_not_with_one():
    ld = _node(1, Role.LEADER, lead=1)
    assert liveness_wakes(1, [("l", ld)], {2}, {2}) == []
    assert liveness_wakes(1, [("l", ld)], {2, 3}, {3}) == [("l", False)]


def test_liveness_wakes_a_leader_one_of_whose_members_restarted():
    """The restarted process may have lost its storage: a replacement may not
    campaign, so only this wake lets the quiesced leader re-admit it."""
    ld = _node(1, Role.LEADER, lead=1)
    assert liveness_wakes(1, [("l", ld)], set(), {2}, {2}) == [("l", False)]
    assert liveness_wakes(1, [("l", ld)], set(), {4}, {4}) == []  # not a member
