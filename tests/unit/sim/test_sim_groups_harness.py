"""The multi-group simulator's pieces (raftlog/sim with groups > 1): placement,
per-node faults, coalesced heartbeats, I1 group isolation, I8 drops of messages
for groups a node does not host, per-group liveness (I4), and the one-group
simulator left as it was."""

from __future__ import annotations

from dataclasses import fields

import pytest

from raftlog.core import AppendEntries, Heartbeat, MsgType
from raftlog.entry import EntryType, LogEntry
from raftlog.sim import SimCluster, SimFailure, SimParams, run_seed
from raftlog.sim.cluster import placement
from raftlog.sim.invariants import Checker, InvariantViolation
from raftlog.sim.runner import params_for, replay_command
from raftlog.transport.beats import Beats


def _elected(c: SimCluster, deadline: int = 5000) -> None:
    """Run until every group has a leader (a condition with a simulated deadline)."""
    ok = c.run_until(deadline, lambda: all(g.leader() is not None for g in c.gs))
    assert ok, c.state()


def test_placement_is_round_robin_on_distinct_nodes():
    for hosts, size in ((3, 3), (5, 3), (7, 5)):
        sets = [placement(g, hosts, size) for g in range(4 * hosts)]
        assert all(len(set(s)) == size and set(s) <= set(range(1, hosts + 1)) for s in sets)
        # every node holds the same number of replicas and first places
        per_node = [sum(n in s for s in sets) for n in range(1, hosts + 1)]
        firsts = [sum(s[0] == n for s in sets) for n in range(1, hosts + 1)]
        assert len(set(per_node)) == 1 and len(set(firsts)) == 1, (per_node, firsts)


def test_a_node_hosts_only_the_groups_placed_on_it():
    c = SimCluster(1, SimParams(voters=3, groups=10, extra_nodes=2))
    assert len(c.hosts) == 5
    for h in c.hosts.values():
        assert set(h.replicas) == {g.gid for g in c.gs if h.id in g.nodes}
        assert 0 < len(h.replicas) < 10
    for g in c.gs:
        assert sorted(g.nodes) == sorted(placement(g.gid, 5, 3))
        assert all(sn.cfg.group_id == g.gid for sn in g.nodes.values())


def test_a_crash_stops_every_group_on_the_node_and_loses_their_unsynced_readies():
    c = SimCluster(3, SimParams(voters=3, groups=6, fsync_max=30))
    _elected(c)
    for g in c.gs:
        g.propose()
    h = c.leader_host()
    assert h is not None
    # replicas holding entries that are not durable yet (in a Ready waiting for the
    # node's disk round, or not yet taken)
    unsynced = {
        gid: sn.node.log.last_index()  # type: ignore[union-attr]
        for gid, sn in h.replicas.items()
        if sn.node.log.last_index() > sn.storage.last_index()  # type: ignore[union-attr]
    }
    assert len(unsynced) >= 2, "the node leading the most of 6 groups got 2+ proposals"
    c.crash(h.id)
    assert not h.up and all(sn.node is None and sn.pending is None for sn in h.replicas.values())
    # the round was lost for every group in it: none of those entries reached the disk
    assert all(h.replicas[gid].storage.last_index() < last for gid, last in unsynced.items())
    c.run_until(c.now + 500)
    c.restart(h.id)
    assert all(sn.node is not None for sn in h.replicas.values())

    def caught_up() -> bool:
        for gid, sn in h.replicas.items():
            ld = c.gs[gid].leader()
            if ld is None or sn.applied < ld.node.log.committed:  # type: ignore[union-attr]
                return False
        return True

    assert c.run_until(c.now + 3000, caught_up), c.state()


def test_a_partition_cuts_a_node_pair_for_every_group():
    c = SimCluster(4, SimParams(voters=3, groups=4))
    _elected(c)
    c.cut = [{1}, {2, 3}]
    sent: list[tuple[int, int]] = []
    orig = c.schedule

    def spy(at, kind, payload):
        if kind == "msg":
            sent.append((payload.src, payload.dst))
        orig(at, kind, payload)

    c.schedule = spy  # type: ignore[method-assign]
    c.run_until(c.now + 300)
    assert sent and not any(1 in pair and pair != (1, 1) for pair in sent)


def test_heartbeats_travel_coalesced_and_are_expanded_per_group():
    c = SimCluster(5, SimParams(voters=3, groups=16))
    kinds: list[object] = []
    orig = c._transmit

    def spy(m):
        kinds.append(m.type)
        orig(m)

    c._transmit = spy  # type: ignore[method-assign]
    _elected(c)
    c.run_until(c.now + 500)
    assert MsgType.HEARTBEAT not in kinds and MsgType.HEARTBEAT_RESP not in kinds
    assert c.beats_sent > 0 and c.beat_rows_sent > 2 * c.beats_sent, (
        c.beats_sent,
        c.beat_rows_sent,
    )
    # every group's followers still hear their leader: commit indexes advance everywhere
    for g in c.gs:
        g.propose()
    c.run_until(c.now + 500)
    for g in c.gs:
        ld = g.leader()
        assert ld is not None
        assert all(sn.node.log.committed == ld.node.log.committed for sn in g.nodes.values())  # type: ignore[union-attr]


def test_without_coalescing_heartbeats_travel_one_per_group():
    c = SimCluster(5, SimParams(voters=3, groups=4, coalesce=False))
    _elected(c)
    c.run_until(c.now + 300)
    assert c.beats_sent == 0


def test_a_message_for_a_group_the_node_does_not_host_is_dropped_and_counted():
    c = SimCluster(6, SimParams(voters=3, groups=5, extra_nodes=2))
    _elected(c)
    g = c.gs[0]
    outsider = next(i for i in c.hosts if i not in g.nodes)
    src = next(iter(g.nodes))
    before = {gid: sn.node.term for gid, sn in c.hosts[outsider].replicas.items()}  # type: ignore[union-attr]
    c.schedule(c.now + 1, "msg", Heartbeat(src=src, dst=outsider, term=99, group_id=0))
    c.schedule(
        c.now + 1,
        "msg",
        AppendEntries(src=src, dst=outsider, term=99, group_id=0, prev_index=0, prev_term=0),
    )
    # a coalesced beat for a hosted group and a foreign one: the foreign row alone is dropped
    hosted = next(iter(c.hosts[outsider].replicas))
    rows = [(hosted, 1, 0, 0), (0, 99, 0, 0)]
    c.schedule(
        c.now + 1, "msg", Beats(src=src, dst=outsider, term=0, group_id=2**63 - 1, rows=rows)
    )
    c.run_until(c.now + 2)
    assert c.unknown_group_msgs == 2 and c.unknown_group_rows == 1
    # no replica on the outsider saw term 99
    after = {gid: sn.node.term for gid, sn in c.hosts[outsider].replicas.items()}  # type: ignore[union-attr]
    assert after == before and 99 not in after.values()


def test_group_isolation_catches_an_entry_of_another_group():
    ck = Checker(group=1, tag=b"g1:")
    ck.check_entries("x", [LogEntry(1, 1, EntryType.DATA, b"g1:v1")], 0)
    ck.check_entries("x", [LogEntry(2, 1, EntryType.NOOP, b"")], 1)
    with pytest.raises(InvariantViolation, match="group 1: group isolation"):
        ck.check_entries("x", [LogEntry(3, 1, EntryType.DATA, b"g11:v1")], 1)
    with pytest.raises(InvariantViolation, match="group isolation"):
        ck.on_apply(2, LogEntry(4, 1, EntryType.DATA, b"g2:v9"), b"d")
    Checker().check_entries("x", [LogEntry(1, 1, EntryType.DATA, b"v1")], 0)  # one group: off


def test_liveness_is_per_group_and_names_a_stuck_group(monkeypatch):
    """A group whose messages never arrive after the heal fails I4 alone, named."""
    orig = SimCluster._transmit

    def drop_group_2_after_chaos(self, m):
        if m.group_id == 2 and self.now >= 20 * 10:
            return
        orig(self, m)

    monkeypatch.setattr(SimCluster, "_transmit", drop_group_2_after_chaos)
    with pytest.raises(SimFailure, match=r"liveness: groups \[2\] of 4") as info:
        run_seed(7, steps=20, groups=4, voters=3, coalesce=False, crash_weight=0)
    assert "--groups 4" in str(info.value)


def test_one_group_parameters_and_traces_are_those_of_before():
    one_group = {f.name for f in fields(SimParams)} - {
        "groups",
        "extra_nodes",
        "misroute",
        "coalesce",
    }
    for seed in range(30):
        p1, p8 = params_for(seed), params_for(seed, 8)
        assert p1.groups == 1 and p8.groups == 8
        assert all(getattr(p1, k) == getattr(p8, k) for k in one_group), seed
    # one group: no group tags in proposals or trace lines
    c = SimCluster(11, params_for(11), trace_len=10**5)
    c.run_until(2000, lambda: c.leader() is not None)
    c.propose()
    c.run_until(c.now + 200)
    assert not any(" g0 " in line or "g0:" in line for line in c.trace)
    assert replay_command(3, 200) == "python -m raftlog.sim --seed 3 --steps 200 --verbose"
    assert replay_command(3, 100, 64).endswith("--steps 100 --groups 64 --verbose")


def test_a_multi_group_seed_replays_identically():
    a, b = run_seed(12, steps=60, groups=8), run_seed(12, steps=60, groups=8)
    assert a == b and a.groups == 8 and a.beats_sent > 0
